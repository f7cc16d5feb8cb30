"""Demo data: restaurants, a menu of ~80 products, customers and couriers in Bengaluru.

Deterministic for a given random generator, and idempotent: seeding a database
that already has restaurants only makes sure the demo accounts exist.

The accounts' password (:func:`demo_accounts`): with debug on (``make run``) the public
``ordertrack-demo``, and ``operator`` is a superuser; with debug off only the password the
operator gives in ``SIMULATOR_DEMO_PASSWORD`` (refused when missing, public or weak), and
no account is a superuser; a database seeded before (with debug on) has its public-password
accounts moved to that password, and ``operator`` demoted (:mod:`tracker.simulator.checks`
refuses such a database with debug off until then).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password, make_password
from django.contrib.auth.password_validation import (
    CommonPasswordValidator,
    NumericPasswordValidator,
    get_default_password_validators,
    validate_password,
)
from django.core.exceptions import ValidationError
from django.db import transaction

from tracker.couriers.models import Courier
from tracker.customers.models import Address, Customer
from tracker.restaurants.models import Product, Restaurant

#: The book's city. Restaurants and customers are spread over ~9 km around it.
CITY_CENTER = (12.9716, 77.5946)
CITY_SPREAD_DEG = 0.08
DEMO_PASSWORD = "ordertrack-demo"
OPERATOR_USERNAME = "operator"
#: The names the seeder gives its accounts (operator, staff1.., customer1.., courier1..).
DEMO_USERNAMES = r"^(operator|staff[0-9]+|customer[0-9]+|courier[0-9]+)$"


@dataclass(frozen=True)
class DemoAccounts:
    """The demo accounts' password, and whether ``operator`` is a superuser (Django admin)."""

    password: str
    superuser: bool


#: ``make run``'s accounts (debug on): the password the README shows.
PUBLIC_DEMO_ACCOUNTS = DemoAccounts(DEMO_PASSWORD, superuser=True)


class DemoAccountsRefused(Exception):
    """Debug is off and no acceptable ``SIMULATOR_DEMO_PASSWORD`` was given."""


def demo_accounts() -> DemoAccounts:
    """The accounts to seed: the public ones with debug on; with debug off the operator's
    ``SIMULATOR_DEMO_PASSWORD`` (checked by Django's password validators, never the public,
    a common or an all-digit one) and no superuser, or :class:`DemoAccountsRefused` saying what to set."""
    if settings.DEBUG:
        return PUBLIC_DEMO_ACCOUNTS
    password = settings.SIMULATOR_DEMO_PASSWORD
    problem = None
    if not password:
        problem = "is not set"
    elif password == DEMO_PASSWORD:
        problem = "is the public demo password"
    else:
        try:
            # The project's validators, and never a common or all-digit password: ~270
            # accounts share it, so it must not be guessable.
            checks = [
                *get_default_password_validators(),
                CommonPasswordValidator(),
                NumericPasswordValidator(),
            ]
            validate_password(password, password_validators=checks)
        except ValidationError as exc:
            problem = "is too weak: " + " ".join(exc.messages)
    if problem is not None:
        raise DemoAccountsRefused(
            f"DJANGO_DEBUG is off and SIMULATOR_DEMO_PASSWORD {problem}. With debug off the "
            "simulator creates its ~270 demo accounts only with a password you choose: set "
            "SIMULATOR_DEMO_PASSWORD (8+ characters, not the public demo password), or run "
            "with DJANGO_DEBUG=true on a development database."
        )
    return DemoAccounts(password, superuser=False)


def accounts_with_the_public_password() -> list[str]:
    """The demo accounts (by name) whose password is still the public ``ordertrack-demo``:
    a database seeded with debug on, or before debug off refused it. The seeder hashes the
    password once for all of them, so each distinct hash is checked once."""
    users = get_user_model().objects.filter(username__regex=DEMO_USERNAMES, is_active=True)
    public = [
        hashed
        for hashed in users.values_list("password", flat=True).distinct()
        if check_password(DEMO_PASSWORD, hashed)
    ]
    return sorted(users.filter(password__in=public).values_list("username", flat=True))


def _retire_public_password(accounts: DemoAccounts, password_hash: str) -> None:
    """With a chosen password (debug off), the demo accounts that still hold the public
    one take the chosen one, and ``operator`` stops being a superuser."""
    if accounts.password == DEMO_PASSWORD:
        return
    names = accounts_with_the_public_password()
    users = get_user_model().objects.filter(username__in=names)
    users.update(password=password_hash)
    if not accounts.superuser:
        users.filter(username=OPERATOR_USERNAME).update(is_superuser=False)


RESTAURANTS = [
    ("Indiranagar Pizza Co.", "100 Feet Rd, Indiranagar", 12.9719, 77.6412),
    ("Koramangala Slice", "80 Feet Rd, Koramangala", 12.9352, 77.6245),
    ("MG Road Oven", "MG Road", 12.9756, 77.6050),
    ("Jayanagar Crust", "4th Block, Jayanagar", 12.9250, 77.5938),
    ("Malleshwaram Margherita", "Sampige Rd, Malleshwaram", 13.0035, 77.5710),
    ("Whitefield Woodfire", "ITPL Main Rd, Whitefield", 12.9698, 77.7500),
    ("HSR Hearth", "27th Main, HSR Layout", 12.9116, 77.6474),
    ("Basavanagudi Bakes", "Bull Temple Rd, Basavanagudi", 12.9422, 77.5738),
]

MENU = {
    "Pizza": [
        ("Margherita", "8.50"),
        ("Farmhouse", "11.00"),
        ("Peppy Paneer", "11.50"),
        ("Veg Extravaganza", "12.50"),
        ("Chicken Tikka", "13.00"),
        ("Pepperoni", "12.00"),
        ("Mexican Green Wave", "11.50"),
        ("Double Cheese", "10.00"),
        ("Paneer Makhani", "12.00"),
        ("BBQ Chicken", "13.50"),
        ("Deluxe Veggie", "11.00"),
        ("Chicken Dominator", "14.50"),
        ("Four Cheese", "12.50"),
        ("Spicy Keema", "13.00"),
        ("Corn and Capsicum", "9.50"),
        ("Tandoori Paneer", "12.00"),
        ("Hawaiian", "11.50"),
        ("Mushroom Truffle", "14.00"),
        ("Pesto Veggie", "11.50"),
        ("Smoky Chipotle", "13.00"),
        ("Golden Corn", "9.00"),
        ("Onion and Chilli", "8.50"),
        ("Paneer Tikka Butter", "12.50"),
        ("Garden Fresh", "10.50"),
        ("Chicken Sausage", "12.00"),
        ("Veggie Paradise", "11.00"),
        ("Achari Do Pyaza", "10.50"),
        ("Cheese and Tomato", "9.00"),
        ("Meat Feast", "15.00"),
        ("Butter Chicken", "13.50"),
    ],
    "Sides": [
        ("Garlic Breadsticks", "3.50"),
        ("Stuffed Garlic Bread", "4.50"),
        ("Potato Wedges", "3.00"),
        ("Cheesy Dip", "1.00"),
        ("Chicken Wings", "6.50"),
        ("Paneer Bites", "5.00"),
        ("Taco Mexicana", "4.00"),
        ("Crinkle Fries", "3.00"),
        ("Jalapeno Poppers", "4.50"),
        ("Onion Rings", "3.50"),
        ("Bruschetta", "4.00"),
        ("Masala Potato Bites", "3.50"),
    ],
    "Pasta": [
        ("Penne Arrabbiata", "7.50"),
        ("Creamy Tomato Pasta", "7.50"),
        ("Pasta Alfredo", "8.00"),
        ("Chicken Pesto Pasta", "9.00"),
        ("Mac and Cheese", "7.00"),
        ("Veg Lasagne", "9.50"),
    ],
    "Salads": [
        ("Caesar Salad", "6.50"),
        ("Greek Salad", "6.00"),
        ("Chicken Caesar", "7.50"),
        ("Quinoa Bowl", "8.00"),
        ("Garden Salad", "5.50"),
        ("Paneer Tikka Salad", "7.00"),
    ],
    "Desserts": [
        ("Choco Lava Cake", "3.50"),
        ("Butterscotch Mousse", "3.50"),
        ("Brownie", "3.00"),
        ("Tiramisu", "5.00"),
        ("Red Velvet Lava", "4.00"),
        ("Gulab Jamun", "2.50"),
        ("Mango Kulfi", "3.00"),
        ("Cheesecake", "5.00"),
    ],
    "Beverages": [
        ("Pepsi", "1.50"),
        ("7UP", "1.50"),
        ("Mirinda", "1.50"),
        ("Masala Lemonade", "2.00"),
        ("Iced Tea", "2.50"),
        ("Cold Coffee", "3.00"),
        ("Mango Lassi", "2.50"),
        ("Sparkling Water", "1.50"),
        ("Filter Coffee", "2.00"),
        ("Fresh Lime Soda", "2.00"),
    ],
}

FIRST_NAMES = [
    "Aarav",
    "Vivaan",
    "Aditya",
    "Ananya",
    "Diya",
    "Ishaan",
    "Kavya",
    "Meera",
    "Rohan",
    "Saanvi",
    "Arjun",
    "Priya",
    "Rahul",
    "Sneha",
    "Vikram",
    "Neha",
    "Karthik",
    "Lakshmi",
    "Nikhil",
    "Pooja",
]
LAST_NAMES = [
    "Sharma",
    "Iyer",
    "Reddy",
    "Nair",
    "Rao",
    "Gowda",
    "Menon",
    "Patel",
    "Kumar",
    "Shetty",
]
STREETS = [
    "Residency Rd",
    "Brigade Rd",
    "Church St",
    "Cunningham Rd",
    "Lavelle Rd",
    "Richmond Rd",
    "Old Airport Rd",
    "Bannerghatta Rd",
    "Hosur Rd",
    "Sarjapur Rd",
    "Bellary Rd",
    "Tumkur Rd",
]


@dataclass(frozen=True)
class DemoSize:
    customers: int = 200
    couriers: int = 60


def _menu_items(rng: random.Random) -> list[tuple[str, str, str]]:
    """~80 (name, category, price) rows spread over the restaurants."""
    rows = [(name, category, price) for category, items in MENU.items() for name, price in items]
    rng.shuffle(rows)
    return rows


def _image_url(category: str) -> str:
    """A category illustration shipped with the frontend (no internet at run time), as a
    path under ``STATIC_URL``: one of the two forms a product picture may take."""
    return f"{settings.STATIC_URL}menu/{category.lower()}.svg"


@transaction.atomic
def seed_demo(
    rng: random.Random, size: DemoSize | None = None, accounts: DemoAccounts | None = None
) -> dict[str, int]:
    """Create the demo world if the database has none; return counts of what exists.

    ``accounts`` defaults to :func:`demo_accounts` (which refuses with debug off and no
    ``SIMULATOR_DEMO_PASSWORD``)."""
    size = size or DemoSize()
    accounts = accounts or demo_accounts()
    user_model = get_user_model()
    password_hash = make_password(accounts.password)  # hashed once: PBKDF2 is slow by design
    _retire_public_password(accounts, password_hash)
    if not user_model.objects.filter(username=OPERATOR_USERNAME).exists():
        user_model.objects.create(
            username=OPERATOR_USERNAME,
            first_name="Ops",
            last_name="Desk",
            is_staff=True,  # the operator role (tracker.orders.policy.is_operator)
            is_superuser=accounts.superuser,
            password=password_hash,
        )
    if not Restaurant.objects.exists():
        restaurants = [
            Restaurant.objects.create(name=name, address=address, lat=lat, lon=lon)
            for name, address, lat, lon in RESTAURANTS
        ]
        menu = _menu_items(rng)
        products = []
        for index, (name, category, price) in enumerate(menu):
            restaurant = restaurants[index % len(restaurants)]
            products.append(
                Product(
                    restaurant=restaurant,
                    name=name,
                    category=category,
                    price=Decimal(price),
                    image_url=_image_url(category),
                    description=f"{category[:-1] if category.endswith('s') else category} "
                    f"from {restaurant.name}",
                )
            )
        # Every restaurant sells drinks and a dessert too, so baskets look real.
        for restaurant in restaurants:
            have = {p.name for p in products if p.restaurant is restaurant}
            for name, price in MENU["Beverages"][:3]:
                if name not in have:
                    products.append(
                        Product(
                            restaurant=restaurant,
                            name=name,
                            category="Beverages",
                            price=Decimal(price),
                            image_url=_image_url("Beverages"),
                        )
                    )
        Product.objects.bulk_create(products)
        for index, restaurant in enumerate(restaurants):
            staff = user_model.objects.create(
                username=f"staff{index + 1}",
                first_name="Staff",
                last_name=restaurant.name.split()[0],
                password=password_hash,
            )
            restaurant.staff.add(staff)

    if not Customer.objects.exists():
        for index in range(size.customers):
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            user = user_model.objects.create(
                username=f"customer{index + 1}",
                first_name=first,
                last_name=last,
                email=f"customer{index + 1}@example.com",
                password=password_hash,
            )
            customer = Customer.objects.create(user=user, phone=f"+91 98{rng.randrange(10**8):08d}")
            for label, is_default in (("Home", True), ("Work", False))[: rng.choice((1, 2))]:
                Address.objects.create(
                    customer=customer,
                    label=label,
                    line1=f"{rng.randrange(1, 400)} {rng.choice(STREETS)}",
                    lat=round(CITY_CENTER[0] + rng.uniform(-1, 1) * CITY_SPREAD_DEG, 6),
                    lon=round(CITY_CENTER[1] + rng.uniform(-1, 1) * CITY_SPREAD_DEG, 6),
                    is_default=is_default,
                )
    if not Courier.objects.exists():
        for index in range(size.couriers):
            user = user_model.objects.create(
                username=f"courier{index + 1}",
                first_name=rng.choice(FIRST_NAMES),
                last_name=rng.choice(LAST_NAMES),
                password=password_hash,
            )
            Courier.objects.create(
                user=user,
                vehicle=rng.choice(list(Courier.Vehicle.values)),
                phone=f"+91 97{rng.randrange(10**8):08d}",
            )
    return {
        "restaurants": Restaurant.objects.count(),
        "products": Product.objects.count(),
        "customers": Customer.objects.count(),
        "couriers": Courier.objects.count(),
    }

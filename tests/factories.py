"""Small builders for system-of-record rows used across tests."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from contract.lifecycle import LIFECYCLE, OrderStatus
from tracker.couriers.models import Courier
from tracker.customers.models import Address, Customer
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.restaurants.models import Product, Restaurant
from tracker.simulator.seed import PUBLIC_DEMO_ACCOUNTS, DemoSize, seed_demo


def make_customer(username: str = "alice") -> Customer:
    user = get_user_model().objects.create_user(username, password="pw-" + username)
    customer = Customer.objects.create(user=user)
    Address.objects.create(
        customer=customer, line1="1 Church St", lat=12.975, lon=77.605, is_default=True
    )
    return customer


def make_restaurant(name: str = "Test Pizza") -> Restaurant:
    restaurant = Restaurant.objects.create(name=name, lat=12.9719, lon=77.6412)
    Product.objects.create(
        restaurant=restaurant, name="Margherita", category="Pizza", price=Decimal("8.50")
    )
    Product.objects.create(
        restaurant=restaurant, name="Pepsi", category="Beverages", price=Decimal("1.50")
    )
    return restaurant


def make_courier(username: str = "rider") -> Courier:
    user = get_user_model().objects.create_user(username, password="pw-" + username)
    return Courier.objects.create(user=user)


def place(customer: Customer, restaurant: Restaurant, **kwargs):
    products = list(restaurant.products.order_by("id"))
    items = kwargs.pop("items", None) or [
        services.ItemRequest(products[0].pk, 2),
        services.ItemRequest(products[1].pk, 1),
    ]
    address = customer.addresses.first()
    order, _ = services.place_order(
        customer=customer,
        restaurant=restaurant,
        items=items,
        delivery_address=address.line1,
        delivery_lat=address.lat,
        delivery_lon=address.lon,
        **kwargs,
    )
    return order


def out_for_delivery(customer: Customer, restaurant: Restaurant, courier: Courier):
    """An order placed, confirmed, prepared, cooked and out for delivery with ``courier``
    (the database's side only: the pipeline's records are the test's to publish)."""
    order = place(customer, restaurant)
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    return services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=courier)


def seed_small_world(seed: int = 1) -> None:
    seed_demo(random.Random(seed), DemoSize(customers=20, couriers=8), PUBLIC_DEMO_ACCOUNTS)


@dataclass
class World:
    """A test's data (:func:`make_world`): the customer alice and her orders at a
    restaurant, and whoever else the test asked for."""

    alice: Customer
    restaurant: Restaurant
    #: Alice's orders at ``restaurant``, as ``make_world(orders=...)`` took them.
    orders: list[Order]
    couriers: list[Courier]
    bob: Customer | None = None
    #: Bob's own order at ``restaurant``.
    other: Order | None = None
    #: A second restaurant, with alice's order there.
    second: Restaurant | None = None
    second_order: Order | None = None
    #: The restaurant's staff member "cook" (the second restaurant's: "curry-cook").
    cook: Any = None
    #: An API token per user, by username (``make_world(tokens=True)``).
    tokens: dict[str, str] = field(default_factory=dict)
    #: The shared tracking link (``make_world(shared=...)``) and its token.
    link: Any = None
    share_token: str = ""

    @property
    def order(self) -> Order:
        return self.orders[0]


def make_world(
    *,
    restaurant: str = "Test Pizza",
    orders: tuple[str, ...] = (OrderStatus.PLACED_ORDER,),
    couriers: tuple[str, ...] = (),
    bob: bool = False,
    other: bool = False,
    second_restaurant: str | None = None,
    cooks: bool = False,
    operator: bool = False,
    menu_images: bool = False,
    tokens: bool = False,
    shared: int | None = None,
) -> World:
    """One builder for every test's world, so they read alike: alice's orders at
    ``restaurant``, each taken along the happy path to its status in ``orders`` (the
    first of ``couriers`` carries those that leave the kitchen); ``bob`` (with ``other``,
    an order of his own); a second restaurant; the cooks "cook" and "curry-cook"; the
    operator "ops" (staff); menu images; a token per user; a shared link to
    ``orders[shared]``. Every user's password is ``pw-<username>``."""
    users = get_user_model().objects
    alice = make_customer("alice")
    place_ = make_restaurant(restaurant)
    if menu_images:
        for product in place_.products.all():
            product.image_url = f"/static/menu/{product.category.lower()}.svg"
            product.save(update_fields=["image_url"])
    riders = [make_courier(name) for name in couriers]
    made = [place(alice, place_) for _ in orders]
    for order, status in zip(made, orders, strict=True):
        _take_to(order, OrderStatus(status), riders[0] if riders else None)
    world = World(
        alice=alice,
        restaurant=place_,
        orders=[Order.objects.select_related("courier").get(pk=o.pk) for o in made],
        couriers=riders,
    )
    if bob or other:
        world.bob = make_customer("bob")
        world.other = place(world.bob, place_) if other else None
    if second_restaurant is not None:
        world.second = make_restaurant(second_restaurant)
        world.second_order = place(alice, world.second)
    if cooks:
        world.cook = users.create_user("cook", password="pw-cook")
        place_.staff.add(world.cook)
        if world.second is not None:
            world.second.staff.add(users.create_user("curry-cook", password="pw-curry-cook"))
    if operator:
        users.create_user("ops", password="pw-ops", is_staff=True)
    if tokens:
        from tracker.accounts.services import issue_token

        world.tokens = {u.username: issue_token(u).key for u in users.all()}
    if shared is not None:
        from tracker.sharing import services as sharing

        world.link, world.share_token = sharing.create_link(world.orders[shared].pk, by=alice.user)
    return world


async def amake_world(**options: Any) -> World:
    """:func:`make_world` from an ``async`` test."""
    return await database_sync_to_async(make_world)(**options)


def _take_to(order: Order, status: OrderStatus, courier: Courier | None) -> None:
    """Advance ``order`` step by step along the happy path to ``status``."""
    for step in LIFECYCLE[
        LIFECYCLE.index(OrderStatus(order.status)) + 1 : LIFECYCLE.index(status) + 1
    ]:
        carrier = courier if step == OrderStatus.OUT_FOR_DELIVERY else None
        services.advance_order(order.pk, by=SYSTEM, to=step.value, courier=carrier)

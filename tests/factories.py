"""Small builders for system-of-record rows used across tests."""

from __future__ import annotations

import random
from decimal import Decimal

from django.contrib.auth import get_user_model

from tracker.couriers.models import Courier
from tracker.customers.models import Address, Customer
from tracker.orders import services
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

"""Placing an order: checked against the menu, written with its lines, announced by its
two events in the same transaction; a retried request with the same idempotency key
gets the first order back."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction

from contract import events
from contract.events import OrderStatus, epoch_ms
from tracker.customers.models import Customer
from tracker.orders.models import Order, OrderItem
from tracker.orders.services.errors import OrderError
from tracker.orders.services.lifecycle import record_status, when
from tracker.outbox.services import enqueue
from tracker.restaurants.models import Product, Restaurant

MAX_QUANTITY_PER_LINE = 50
MAX_LINES_PER_ORDER = 30


@dataclass(frozen=True)
class ItemRequest:
    """One line as the customer asked for it (priced from the menu when placed)."""

    product_id: int
    quantity: int


def place_order(
    *,
    customer: Customer,
    restaurant: Restaurant,
    items: Sequence[ItemRequest],
    delivery_address: str,
    delivery_lat: float,
    delivery_lon: float,
    idempotency_key: str | None = None,
    at: datetime | None = None,
) -> tuple[Order, bool]:
    """Create an order and its ``orders`` + first ``order_statuses`` events.

    Returns ``(order, created)``. With an ``idempotency_key`` that this customer
    already used, returns the existing order and ``created=False`` so a retried
    POST never places a second order.
    """
    if existing := _by_key(customer, idempotency_key):
        return existing, False
    _check_request(restaurant, items, delivery_lat, delivery_lon)
    products = _products(restaurant, items)
    try:
        with transaction.atomic():
            order = _write_order(
                customer,
                restaurant,
                items,
                products,
                delivery_address=delivery_address,
                delivery_lat=delivery_lat,
                delivery_lon=delivery_lon,
                idempotency_key=idempotency_key,
                now=when(at),
            )
    except IntegrityError:
        # Two retries with the same key raced; the other one won.
        if existing := _by_key(customer, idempotency_key):
            return existing, False
        raise
    return order, True


def _by_key(customer: Customer, idempotency_key: str | None) -> Order | None:
    """The order this customer already placed with ``idempotency_key``, if any."""
    if not idempotency_key:
        return None
    return Order.objects.filter(customer=customer, idempotency_key=idempotency_key).first()


def _check_request(
    restaurant: Restaurant, items: Sequence[ItemRequest], lat: float, lon: float
) -> None:
    """Refuse an order that no menu could satisfy, before reading the products."""
    if not restaurant.is_open:
        raise OrderError(f"restaurant {restaurant.pk} is closed", field="restaurant")
    if not items:
        raise OrderError("an order needs at least one item", field="items")
    if len(items) > MAX_LINES_PER_ORDER:
        raise OrderError(f"at most {MAX_LINES_PER_ORDER} lines per order", field="items")
    if not (-90 <= lat <= 90) or not (-180 <= lon <= 180):
        raise OrderError("delivery coordinates are out of range", field="delivery_lat")


def _products(restaurant: Restaurant, items: Sequence[ItemRequest]) -> dict[int, Product]:
    """The ordered products by id, each checked on this menu, available, in a sane
    quantity; the error names the line at fault."""
    products = {
        p.pk: p
        for p in Product.objects.filter(restaurant=restaurant, pk__in=[i.product_id for i in items])
    }
    for index, item in enumerate(items):
        product = products.get(item.product_id)
        if product is None:
            raise OrderError(
                f"product {item.product_id} is not on the menu of restaurant {restaurant.pk}",
                field=f"items[{index}].product_id",
            )
        if not product.is_available:
            raise OrderError(
                f"product {product.name!r} is not available", field=f"items[{index}].product_id"
            )
        if not 1 <= item.quantity <= MAX_QUANTITY_PER_LINE:
            raise OrderError(
                f"quantity must be between 1 and {MAX_QUANTITY_PER_LINE}",
                field=f"items[{index}].quantity",
            )
    return products


def _write_order(
    customer: Customer,
    restaurant: Restaurant,
    items: Sequence[ItemRequest],
    products: dict[int, Product],
    *,
    delivery_address: str,
    delivery_lat: float,
    delivery_lon: float,
    idempotency_key: str | None,
    now: datetime,
) -> Order:
    """The order, its lines at today's prices and its two events (in the caller's
    transaction, so the rows and the outbox commit together)."""
    total = sum((products[i.product_id].price * i.quantity for i in items), Decimal("0.00"))
    order = Order.objects.create(
        customer=customer,
        restaurant=restaurant,
        total=total,
        delivery_address=delivery_address,
        delivery_lat=delivery_lat,
        delivery_lon=delivery_lon,
        idempotency_key=idempotency_key or None,
        created_at=now,
        updated_at=now,
        status_changed_at=now,
    )
    lines = OrderItem.objects.bulk_create(
        [
            OrderItem(
                order=order,
                product=products[i.product_id],
                quantity=i.quantity,
                unit_price=products[i.product_id].price,
            )
            for i in items
        ]
    )
    enqueue(_placed_event(order, lines, now))
    record_status(order, OrderStatus.PLACED_ORDER, None, now, actor="customer")
    return order


def _placed_event(order: Order, lines: list[OrderItem], now: datetime) -> events.OrderPlaced:
    """The ``orders`` event: the order with what the stream job joins on (names, places)."""
    customer, restaurant = order.customer, order.restaurant
    return events.OrderPlaced(
        event_id=str(uuid.uuid4()),
        event_time=epoch_ms(now),
        order_id=order.pk,
        customer_id=customer.pk,
        customer_name=customer.display_name,
        restaurant_id=restaurant.pk,
        restaurant_name=restaurant.name,
        restaurant_lat=restaurant.lat,
        restaurant_lon=restaurant.lon,
        delivery_lat=order.delivery_lat,
        delivery_lon=order.delivery_lon,
        items=[
            events.OrderItem(
                product_id=line.product.pk,
                name=line.product.name,
                category=line.product.category,
                quantity=line.quantity,
                unit_price=str(line.unit_price),
            )
            for line in lines
        ],
        total=str(order.total),
    )

"""Reads of the system of record (the database) that the read model needs: an order's
placed part, its recorded state and history, a courier's name.

The tracking reads are Pinot's (:mod:`tracker.tracking.selectors.orders`); these answer
what Pinot does not hold, or holds only once the pipeline has seen an order.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Prefetch

from contract.events import epoch_ms
from tracker.couriers.models import Courier
from tracker.orders.models import Order, OrderItem, OrderStatusChange
from tracker.tracking.selectors.orders import StatusPeriod, status_periods
from tracker.tracking.shapes import DeliveryPlace, LineItem, Millis, Named, Place, PlacedOrder

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def millis(moment: datetime) -> Millis:
    """A database time as epoch millis, exactly (no float on the way, so it shows the
    same millisecond as the time itself)."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def placed_order(order_id: int) -> PlacedOrder | None:
    """The order's placed part, in three queries (None when there is no such order)."""
    order = (
        Order.objects.select_related("restaurant", "customer__user")
        .prefetch_related(Prefetch("items", OrderItem.objects.select_related("product")))
        .filter(pk=order_id)
        .first()
    )
    if order is None:
        return None
    restaurant = order.restaurant
    return PlacedOrder(
        id=order.pk,
        customer_user_id=order.customer.user_id,
        created_at=millis(order.created_at),
        total=order.total,
        items=tuple(
            LineItem(
                item.product_id,
                item.product.name,
                item.product.category,
                item.quantity,
                item.unit_price,
                item.line_total,
            )  # fmt: skip
            for item in order.items.all()
        ),
        restaurant=Place(restaurant.pk, restaurant.name, restaurant.lat, restaurant.lon),
        customer=Named(order.customer_id, order.customer.display_name),
        delivery=DeliveryPlace(order.delivery_address, order.delivery_lat, order.delivery_lon),
    )


def recorded_order(order_id: int) -> Order:
    """The order row as last written, with its restaurant (for the arrival)."""
    return Order.objects.select_related("restaurant").get(pk=order_id)


def recorded_periods(order_id: int) -> list[StatusPeriod]:
    """The order's timeline from its recorded status changes (before the pipeline has
    seen it, or after a command)."""
    changes = (
        OrderStatusChange.objects.filter(order_id=order_id)
        .order_by("changed_at", "id")
        .values_list("status", "changed_at")
    )
    return status_periods((status, epoch_ms(at)) for status, at in changes)


def courier_name(courier_id: int) -> str | None:
    """A courier's display name (None for an id the database does not know)."""
    courier = Courier.objects.select_related("user").filter(pk=courier_id).first()
    return None if courier is None else courier.display_name

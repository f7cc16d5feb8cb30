"""Order commands: every write to an order goes through these functions.

The API, the admin actions and the simulator all call them, so the lifecycle
rules and the outbox are enforced in exactly one place. Each command changes
the database and enqueues its event in one transaction (no dual-write loss).
Courier GPS points are the exception by design: high-volume telemetry with no
database row, produced straight to Kafka and acknowledged once the broker has
them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from confluent_kafka import KafkaException
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from contract import events
from contract.events import IN_TRANSIT_STATUSES, OrderStatus, epoch_ms
from runtime import kafka
from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.orders import policy
from tracker.orders.models import Order, OrderItem, OrderStatusChange
from tracker.outbox.services import enqueue
from tracker.restaurants.models import Product, Restaurant

MAX_QUANTITY_PER_LINE = 50
MAX_LINES_PER_ORDER = 30
#: A GPS fix stamped further ahead of the server's clock than this is refused. A future
#: point would become the courier's "latest" position and freeze it (and the ETA) until
#: real time caught up. Phones sync their clocks by NTP/GNSS, so seconds are plenty; the
#: event contract's own limit (events.MAX_CLOCK_SKEW_MS, 5 min) is for whole pipelines.
MAX_GPS_CLOCK_SKEW_MS = 30_000
#: GPS points one location request may carry (a phone's offline queue goes in several).
MAX_POINTS_PER_REQUEST = 500


class OrderError(Exception):
    """A command was refused; ``field`` names the input at fault when there is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class IllegalTransition(OrderError):
    """The lifecycle does not allow the requested status change."""


class TelemetryError(Exception):
    """The broker did not acknowledge a courier position."""


@dataclass(frozen=True)
class ItemRequest:
    product_id: int
    quantity: int


def _now(at: datetime | None) -> datetime:
    return at if at is not None else timezone.now()


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
    if idempotency_key:
        existing = Order.objects.filter(customer=customer, idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing, False
    if not restaurant.is_open:
        raise OrderError(f"restaurant {restaurant.pk} is closed", field="restaurant")
    if not items:
        raise OrderError("an order needs at least one item", field="items")
    if len(items) > MAX_LINES_PER_ORDER:
        raise OrderError(f"at most {MAX_LINES_PER_ORDER} lines per order", field="items")
    if not (-90 <= delivery_lat <= 90) or not (-180 <= delivery_lon <= 180):
        raise OrderError("delivery coordinates are out of range", field="delivery_lat")
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

    now = _now(at)
    total = sum((products[i.product_id].price * i.quantity for i in items), Decimal("0.00"))
    try:
        with transaction.atomic():
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
            event_id = str(uuid.uuid4())
            enqueue(
                events.OrderPlaced(
                    event_id=event_id,
                    event_time=epoch_ms(now),
                    order_id=order.pk,
                    customer_id=customer.pk,
                    customer_name=customer.display_name,
                    restaurant_id=restaurant.pk,
                    restaurant_name=restaurant.name,
                    restaurant_lat=restaurant.lat,
                    restaurant_lon=restaurant.lon,
                    delivery_lat=delivery_lat,
                    delivery_lon=delivery_lon,
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
                    total=str(total),
                )
            )
            _record_status(order, OrderStatus.PLACED_ORDER, None, now, actor="customer")
    except IntegrityError:
        # Two retries with the same key raced; the other one won.
        if idempotency_key:
            existing = Order.objects.filter(
                customer=customer, idempotency_key=idempotency_key
            ).first()
            if existing is not None:
                return existing, False
        raise
    return order, True


def _record_status(
    order: Order,
    status: OrderStatus,
    previous: OrderStatus | None,
    at: datetime,
    actor: str,
) -> None:
    event = events.OrderStatusChanged(
        event_id=str(uuid.uuid4()),
        event_time=epoch_ms(at),
        order_id=order.pk,
        placed_at=epoch_ms(order.created_at),
        status=status.value,
        previous_status=previous.value if previous else None,
        courier_id=order.courier_id,
        customer_id=order.customer_id,
        restaurant_id=order.restaurant_id,
    )
    OrderStatusChange.objects.create(
        order=order,
        status=status.value,
        previous_status=previous.value if previous else "",
        changed_at=at,
        event_id=event.event_id,
        actor=actor[:150],
    )
    enqueue(event)


def _actor(by: policy.Actor, via: str) -> str:
    """What the status change records as its actor: the channel (``via``: api, admin,
    simulator) and the user acting through it ("api:alice"; the system: the channel)."""
    if by is policy.SYSTEM:
        return via or "system"
    return f"{via or 'user'}:{by.get_username()}"


def _locked(by: policy.Actor, order_id: int) -> Order:
    """The order, locked for the transaction: the command's one read of it and its one
    access check. NotVisible when ``by`` may not see it (404, like a missing order)."""
    order = (
        policy.visible_orders(by)
        .select_related("restaurant")
        .select_for_update(of=("self",))
        .filter(pk=order_id)
        .first()
    )
    if order is None:
        raise policy.NotVisible(order_id)
    return order


def _check_move(by: policy.Actor, order: Order, target: OrderStatus | None) -> None:
    """Whether ``by`` may move ``order`` to ``target`` now (None: there is no next step):
    who may, by :mod:`tracker.orders.policy` (PermissionDenied), then what the lifecycle
    allows (IllegalTransition). The one place a status change is judged."""
    if target is OrderStatus.CANCELLED:
        if not policy.can_cancel(by, order):
            raise PermissionDenied("Couriers cannot cancel orders.")
    elif target is not None and not policy.can_move_to(by, order, target):
        raise PermissionDenied(f"You may not move this order to {target}.")
    current = OrderStatus(order.status)
    if target is not None and events.can_transition(current, target):
        return
    if target is None:
        message = f"order {order.pk} is {current.value}, which is final"
    elif target is OrderStatus.CANCELLED:
        message = (
            f"order {order.pk} is {current.value} and can no longer be cancelled "
            f"(cancellation is allowed only before {OrderStatus.OUT_FOR_DELIVERY.value})"
        )
    else:
        following = events.next_status(current)
        message = f"order {order.pk} cannot go from {current.value} to {target.value}" + (
            f"; the next status is {following.value}" if following else "; it is final"
        )
    raise IllegalTransition(message, field="status")


def _move(
    order: Order,
    target: OrderStatus,
    *,
    actor: str,
    courier: Courier | None,
    at: datetime | None,
) -> Order:
    """Write the judged change on the locked ``order`` and enqueue its event."""
    previous = OrderStatus(order.status)
    now = _now(at)
    if target is OrderStatus.OUT_FOR_DELIVERY:
        order.courier = courier or order.courier or _pick_courier()
    elif courier is not None:
        order.courier = courier
    order.status = target.value
    order.status_changed_at = now
    order.updated_at = now
    order.save(update_fields=["status", "status_changed_at", "updated_at", "courier"])
    _record_status(order, target, previous, now, actor)
    return order


def advance_order(
    order_id: int,
    *,
    by: policy.Actor,
    to: OrderStatus | str | None = None,
    via: str = "",
    courier: Courier | None = None,
    at: datetime | None = None,
) -> Order:
    """Move an order to ``to`` (default: its next step along the happy path) for ``by``,
    as :func:`tracker.orders.policy.can_move_to` allows: NotVisible for an order they
    may not see, PermissionDenied for a step they may not make, IllegalTransition for a
    step the lifecycle does not allow. Cancelling has its own command.

    ``courier`` carries the order from OUT_FOR_DELIVERY on (default: the one it has, or
    the least busy). The row stays locked to the end of the transaction, so two callers
    moving the same order at once cannot both succeed from the same status."""
    with transaction.atomic():
        order = _locked(by, order_id)  # first: an order they may not see is a 404, whatever `to`
        if to is None:
            target = events.next_status(order.status)
        else:
            try:
                target = OrderStatus(to)
            except ValueError:
                raise OrderError(f"unknown status {to!r}", field="status") from None
            if target is OrderStatus.CANCELLED:
                raise OrderError("use the cancel endpoint", field="status")
        _check_move(by, order, target)
        return _move(order, target, actor=_actor(by, via), courier=courier, at=at)


def cancel_order(
    order_id: int, *, by: policy.Actor, via: str = "", at: datetime | None = None
) -> Order:
    """Cancel an order for ``by`` (its customer, its restaurant's staff or an operator:
    :func:`tracker.orders.policy.can_cancel`), only before it is out for delivery."""
    with transaction.atomic():
        order = _locked(by, order_id)
        _check_move(by, order, OrderStatus.CANCELLED)
        return _move(order, OrderStatus.CANCELLED, actor=_actor(by, via), courier=None, at=at)


def _pick_courier() -> Courier:
    """The active courier with the fewest orders in transit."""
    from django.db.models import Count, Q

    courier = (
        Courier.objects.filter(is_active=True)
        .annotate(
            busy=Count(
                "orders", filter=Q(orders__status__in=[s.value for s in IN_TRANSIT_STATUSES])
            )
        )
        .order_by("busy", "id")
        .first()
    )
    if courier is None:
        raise OrderError("no active courier is available", field="courier")
    return courier


# --------------------------------------------------------------------------- telemetry

#: One idempotent producer per process, shared by every request thread; replaced when
#: it turns fatal (its broker lost the producer's state).
telemetry = kafka.SharedProducer(**{"linger.ms": 2, "message.timeout.ms": 10_000})


@dataclass(frozen=True)
class CourierPosition:
    """One GPS point reported by ``courier`` while carrying ``order``."""

    order: Order
    courier: Courier
    lat: float
    lon: float
    at: datetime | None = None


#: The contract's name of a GPS event field -> what the client sent it as.
_POINT_FIELDS: dict[str, tuple[str, str | None]] = {
    "event_time": ("recorded_at", None),
    "placed_at": ("recorded_at", "is before the order was placed"),
}


def record_locations(positions: Sequence[CourierPosition], *, timeout: float = 10.0) -> int:
    """Publish courier GPS points straight to Kafka; return how many the broker acked.

    All points are validated before any is sent: OrderError when a courier does
    not carry the order or the order is not on the road, EventValidationError
    (naming the field) for an impossible point. TelemetryError when the broker
    did not acknowledge every point within ``timeout``; the caller may retry
    (duplicates are harmless: the stream job keeps the latest point by time).
    One flush covers the whole batch, so a simulator tick or a mobile app's
    offline buffer costs one round trip.
    """
    batch = []
    latest_allowed = epoch_ms(timezone.now()) + MAX_GPS_CLOCK_SKEW_MS
    for index, pos in enumerate(positions):
        if pos.at is not None and epoch_ms(pos.at) > latest_allowed:
            raise events.EventValidationError(
                f"[{index}].recorded_at",
                f"is more than {MAX_GPS_CLOCK_SKEW_MS // 1000} s in the future",
            )
        if pos.order.courier_id != pos.courier.pk:
            raise OrderError(
                f"order {pos.order.pk} is not assigned to this courier", field=f"[{index}].order"
            )
        if OrderStatus(pos.order.status) not in IN_TRANSIT_STATUSES:
            raise OrderError(
                f"order {pos.order.pk} is {pos.order.status}, not in transit",
                field=f"[{index}].order",
            )
        try:
            batch.append(
                events.DeliveryLocation.from_dict(
                    {
                        "event_id": str(uuid.uuid4()),
                        "event_time": epoch_ms(pos.at or timezone.now()),
                        "order_id": pos.order.pk,
                        "placed_at": epoch_ms(pos.order.created_at),
                        "courier_id": pos.courier.pk,
                        "lat": pos.lat,
                        "lon": pos.lon,
                    }
                )
            )
        except events.EventValidationError as exc:
            # Name the field the client sent: the event's times are its recorded_at (and
            # the order's placement, which only a point recorded before it contradicts).
            field, reason = _POINT_FIELDS.get(exc.field, (exc.field, exc.reason))
            raise events.EventValidationError(f"[{index}].{field}", reason or exc.reason) from None
    if not batch:
        return 0
    return _send_points(batch, timeout)


def _send_points(points: list[events.DeliveryLocation], timeout: float) -> int:
    """Send ``points``; when the producer fails (its broker lost its state), replace it and send the points not acknowledged again
    with the new one, within the same ``timeout``. A point in doubt may then arrive
    twice (the stream job keeps the latest point per order by time: no change)."""
    deadline = time.monotonic() + timeout
    todo, acked = list(enumerate(points)), 0
    while True:
        prod = telemetry.get()
        deliveries = kafka.Deliveries(prod)
        try:
            for index, event in todo:
                deliveries.publish(event, tag=index)
            acked += len(deliveries.flush(max(0.1, deadline - time.monotonic())))
            return acked
        except (kafka.Undelivered, KafkaException) as exc:
            telemetry.replace(prod)
            done = set(deliveries.acked)
            acked += len(done)
            todo = [(i, e) for i, e in todo if i not in done]
            time.sleep(0.2)
            if time.monotonic() >= deadline - 0.5:
                errors = getattr(exc, "errors", {})
                raise TelemetryError(
                    f"broker acknowledged {acked} of {len(points)} points"
                    + (f": {next(iter(errors.values()))}" if errors else f": {exc}")
                ) from None

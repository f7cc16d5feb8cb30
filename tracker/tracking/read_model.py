"""What a client is shown of an order: the one read model under REST and WebSocket.

The sockets send these JSON-ready dicts as they are; the REST API renders them
through its serializers (``api/serializers/orders.py``), which describe this shape
for the schema and must neither drop nor change a field (tests/test_api_tracking.py),
so a client sees the same order whichever channel it asks. A new channel (a kitchen
board, a mobile push) calls these functions instead of rebuilding the shape.

Times are ISO-8601 UTC strings with milliseconds; money is a decimal string
("18.50"), whether it comes from the database (Decimal) or from Pinot (a float
column, rounded to cents here, in one place).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from django.db.models import Prefetch

from contract.events import (
    CANCELLABLE_STATUSES,
    LIFECYCLE,
    TERMINAL_STATUSES,
    OrderStatus,
    epoch_ms,
    now_ms,
    status_label,
)
from tracker.couriers.models import Courier
from tracker.notices import listener
from tracker.orders import policy
from tracker.orders.models import Order, OrderItem, OrderStatusChange
from tracker.tracking import eta, selectors, versions
from tracker.tracking.formats import iso, iso_ms, money
from tracker.tracking.lru import BoundedCache
from tracker.tracking.selectors import CourierPosition, OrderState, StatusPeriod

#: Reads predict the arrival as of the clock rounded down to this step, so one order reads
#: the same for that long and a conditional request can answer 304 (its ``computed_at``
#: says when; pushed updates predict as of the moment they are sent).
PREDICTION_STEP_MS = 30_000


def prediction_clock() -> int:
    now = now_ms()
    return now - now % PREDICTION_STEP_MS


def arrival(trip: eta.Trip, now: int) -> dict[str, Any] | None:
    """The predicted arrival with its range and what it rests on (None once delivered or
    cancelled), from the process's cached statistics: no query of its own."""
    prediction = eta.predict(trip, eta.current_statistics(), now)
    if prediction is None:
        return None
    basis = prediction.basis
    return {
        "arrives_at": iso_ms(prediction.arrives_at),
        "earliest": iso_ms(prediction.earliest),
        "latest": iso_ms(prediction.latest),
        "computed_at": iso_ms(prediction.computed_at),
        "basis": {
            "kitchen": basis.get("kitchen"),
            "kitchen_samples": basis.get("kitchen_samples"),
            "speed": basis.get("speed"),
            "speed_kmh": basis.get("speed_kmh"),
            "route_factor": basis.get("route_factor"),
            "route_km_left": basis.get("route_km_left"),
            "stats_as_of": iso_ms(basis.get("stats_as_of")),
        },
    }


# ---------------------------------------------------------------------- per-process copies

#: Orders whose placed part a process keeps (a few KB each), couriers whose name it keeps,
#: and trails it keeps (a position is about 200 bytes; a trail at most 1,000 of them).
PLACED_ORDERS_KEPT = 10_000
COURIER_NAMES_KEPT = 2_000
TRAILS_KEPT = 500


@dataclass(frozen=True)
class PlacedOrder:
    """What a detail shows that is fixed when the order is placed: who ordered from which
    restaurant, the lines at their prices, the total and the delivery address (the
    services never change these and the admin shows them read-only). Kept per process so
    that a detail runs no ORM query for them; who may see the order is still decided on
    every read (:func:`order_detail`)."""

    id: int
    customer_id: int
    customer_user_id: int
    restaurant_id: int
    #: The detail's JSON for these parts: created_at, total, items, restaurant, customer,
    #: delivery. Shared by every request: copy before changing.
    shown: dict[str, Any]


_placed: BoundedCache[int, PlacedOrder] = BoundedCache(PLACED_ORDERS_KEPT)
_courier_names: BoundedCache[int, str] = BoundedCache(COURIER_NAMES_KEPT)
_trails: BoundedCache[tuple[int, int], list[dict[str, Any]]] = BoundedCache(TRAILS_KEPT)

#: Raised by every drop, so a copy read from the database before a change committed is
#: not kept after that change's notice has been handled.
_generation = 0
_generation_lock = threading.Lock()  # a check-then-keep never straddles a drop


def _copies_trusted() -> tuple[bool, int]:
    """Whether copies may be used and kept now, and the generation a new copy belongs to.

    The names and owners in a copy change only through the admin (or a shell), whose
    saves are announced to every process (:mod:`tracker.tracking.invalidation`); copies
    are trusted only while this process's notice listener is reading those notices."""
    listener.ensure_started()
    return listener.healthy(), _generation


def _keep_unless_invalidated(cache: BoundedCache, key: Any, value: Any, generation: int) -> None:
    """Keep a copy read during ``generation``, unless a notice invalidated copies since."""
    with _generation_lock:
        if generation == _generation:
            cache.put(key, value)


def _invalidate(cache: BoundedCache, matching: Any = None, key: Any = None) -> None:
    """Drop the copy under ``key``, or those ``matching(key, copy)``, or all of them; and
    start a new generation, so a copy read before this is not kept after it."""
    global _generation
    with _generation_lock:
        _generation += 1
        if key is not None:
            cache.pop(key)
        elif matching is not None:
            cache.drop_where(matching)
        else:
            cache.clear()


listener.subscribe(
    "copies.customer", lambda pk: _invalidate(_placed, lambda _, p: p.customer_id == pk)
)
listener.subscribe(
    "copies.restaurant", lambda pk: _invalidate(_placed, lambda _, p: p.restaurant_id == pk)
)
listener.subscribe(
    "copies.product",
    lambda pk: _invalidate(
        _placed, lambda _, p: any(i["product_id"] == pk for i in p.shown["items"])
    ),
)
listener.subscribe("copies.courier", lambda pk: _invalidate(_courier_names, key=pk))
listener.on_resync(lambda: (_invalidate(_placed), _invalidate(_courier_names)))


def placed_order(order_id: int) -> PlacedOrder | None:
    """The order's placed part (None when there is no such order), from the database the
    first time this process is asked for it. Order ids are never reused (orders are not
    deleted); what the admin can change in it (owner, names) is dropped from every
    process's copies when it does (:func:`_copies_trusted`)."""
    trusted, generation = _copies_trusted()
    placed = _placed.get(order_id) if trusted else None
    if placed is not None:
        return placed
    order = (
        Order.objects.select_related("restaurant", "customer__user")
        .prefetch_related(Prefetch("items", OrderItem.objects.select_related("product")))
        .filter(pk=order_id)
        .first()
    )
    if order is None:
        return None
    placed = PlacedOrder(
        id=order.pk,
        customer_id=order.customer_id,
        customer_user_id=order.customer.user_id,
        restaurant_id=order.restaurant_id,
        shown={
            "created_at": iso(order.created_at),
            "total": money(order.total),
            "items": [
                {
                    "product_id": item.product_id,
                    "name": item.product.name,
                    "category": item.product.category,
                    "quantity": item.quantity,
                    "unit_price": money(item.unit_price),
                    "line_total": money(item.line_total),
                }
                for item in order.items.all()
            ],
            "restaurant": {
                "id": order.restaurant_id,
                "name": order.restaurant.name,
                "lat": order.restaurant.lat,
                "lon": order.restaurant.lon,
            },  # fmt: skip
            "customer": {"id": order.customer_id, "name": order.customer.display_name},
            "delivery": {
                "address": order.delivery_address,
                "lat": order.delivery_lat,
                "lon": order.delivery_lon,
            },  # fmt: skip
        },
    )
    if trusted:
        _keep_unless_invalidated(_placed, order_id, placed, generation)
    return placed


def courier_name(courier_id: int) -> str | None:
    """A courier's display name (None for an id the database does not know)."""
    trusted, generation = _copies_trusted()
    name = _courier_names.get(courier_id) if trusted else None
    if name is None:
        courier = Courier.objects.select_related("user").filter(pk=courier_id).first()
        if courier is None:
            return None
        name = courier.display_name
        if trusted:
            _keep_unless_invalidated(_courier_names, courier_id, name, generation)
    return name


#: An ended order's positions are all in Pinot this long after its last record.
SETTLED_MS = 60_000


def trail(
    order_id: int, position: CourierPosition, *, ended_at: int | None = None
) -> list[dict[str, Any]]:
    """The trail up to the order's current position, as the detail shows it. Positions are
    only ever added, so a trail that ends at ``position`` stays right for as long as the
    order's state shows that position: it is kept under it and read again once the state
    moves on. An order that ended (``ended_at``) :data:`SETTLED_MS` ago gets no more
    points, so its trail is kept as it is (its last point may be older than the state's
    position, when that position was never stored as a point). Shared by every request:
    copy before changing."""
    key = (order_id, position.at)
    shown = _trails.get(key)
    if shown is None:
        path = selectors.courier_path(order_id)
        shown = [{"lat": p.lat, "lon": p.lon, "at": iso_ms(p.at)} for p in path]
        settled = ended_at is not None and now_ms() - ended_at > SETTLED_MS
        if path and (path[-1].at == position.at or settled):
            _trails.put(key, shown)
    return shown


def forget_copies() -> None:
    """Drop every per-process copy (tests, whose databases reuse order ids)."""
    _placed.clear()
    _courier_names.clear()
    _trails.clear()
    versions.forget()


def timeline(current: str, periods: list[StatusPeriod]) -> list[dict[str, Any]]:
    """The seven lifecycle steps (plus CANCELLED when cancelled), each done/current/pending.

    The step still going on has no duration (it would change with every read, and so would
    the answer's ETag): a client counts from its ``entered_at``."""
    entered = {p.status: p for p in periods}
    cancelled = current == OrderStatus.CANCELLED
    out = []
    for status in [*LIFECYCLE, *([OrderStatus.CANCELLED] if cancelled else [])]:
        period = entered.get(status.value)
        step = {"status": status.value, "label": status_label(status)}
        if period is None:
            state = "skipped" if cancelled else "pending"
            out.append({**step, "state": state, "entered_at": None, "left_at": None,
                        "duration_seconds": None})  # fmt: skip
            continue
        end = period.left_at
        out.append(
            {
                **step,
                "state": "current" if status.value == current else "done",
                "entered_at": iso_ms(period.entered_at),
                "left_at": iso_ms(period.left_at),
                "duration_seconds": None
                if end is None
                else round((end - period.entered_at) / 1000, 1),
            }
        )
    return out


def _entered_from_pinot(order_id: int, state: OrderState) -> dict[str, int]:
    """Entry times: the latest record's per-status columns. Only a record that lacks its
    own current status time (written by an older job) costs a history query."""
    entered = dict(state.status_times)
    if state.status not in entered:
        entered = {p.status: p.entered_at for p in selectors.order_status_history(order_id)}
        entered.update(state.status_times)
    return entered


def order_detail(order_id: int, *, viewer: policy.Actor) -> dict[str, Any]:
    """The order as ``viewer`` is shown it (NotVisible, like a missing order, when they may
    not see it: :func:`tracker.orders.policy.can_see`, asked on every read).

    Items, restaurant and total from the system of record; status, timeline, courier,
    position and ETA from Pinot. Until the pipeline has seen a new order (about a
    second), its status and courier come from the database and ``tracking.source`` says so.
    """
    placed = placed_order(order_id)
    if placed is None or not policy.can_see(viewer, order_id, placed.customer_user_id):
        raise policy.NotVisible(order_id)
    state = versions.order_state(order_id)
    if state is None:
        return _as_recorded(placed, Order.objects.select_related("restaurant").get(pk=order_id))
    position = state.courier
    return _shown(
        placed,
        current=state.status,
        status_time=state.status_time,
        periods=selectors.status_periods(_entered_from_pinot(order_id, state).items()),
        courier_id=state.courier_id,
        position=position,
        path=[]
        if position is None
        else trail(order_id, position, ended_at=None if state.is_active else state.updated_at),
        distance=state.distance_left_km,
        trip=eta.Trip.of_enriched(state),
        source={
            "source": "pinot",
            "version": state.version,
            "updated_at": iso_ms(state.updated_at),
        },
    )


def detail_as_written(order: Order) -> dict[str, Any]:
    """The detail of ``order`` as a command has just written it, for the caller the command
    authorised (no second access check), from the database alone: a command that succeeded
    must not answer 503 because the read side is down."""
    placed = placed_order(order.pk)
    if placed is None:
        raise policy.NotVisible(order.pk)
    return _as_recorded(placed, order)


def _as_recorded(placed: PlacedOrder, order: Order) -> dict[str, Any]:
    """The detail from the database: before the pipeline has seen the order, or after a
    command (no position, no distance; the timeline from the recorded status changes)."""
    status_time = epoch_ms(order.status_changed_at)
    return _shown(
        placed,
        current=order.status,
        status_time=status_time,
        periods=[],
        courier_id=order.courier_id,
        position=None,
        path=[],
        distance=None,
        trip=eta.Trip.of_order(order, order.status, status_time),
        source={"source": "database", "version": 0, "updated_at": iso(order.updated_at)},
    )


def _shown(
    placed: PlacedOrder,
    *,
    current: str,
    status_time: int,
    periods: list[StatusPeriod],
    courier_id: int | None,
    position: CourierPosition | None,
    path: list[dict[str, Any]],
    distance: float | None,
    trip: eta.Trip,
    source: dict[str, Any],
) -> dict[str, Any]:
    """The detail's one shape, whichever store the changing parts came from."""
    now = prediction_clock()
    if not periods:  # the pipeline has not caught up: the database's own history
        periods = selectors.status_periods(
            (status, epoch_ms(at))
            for status, at in OrderStatusChange.objects.filter(order_id=placed.id)
            .order_by("changed_at", "id")
            .values_list("status", "changed_at")
        )
    courier = courier_name(courier_id) if courier_id is not None else None
    return {
        "id": placed.id,
        "status": current,
        "status_label": status_label(current),
        "status_time": iso_ms(status_time),
        "is_active": current not in TERMINAL_STATUSES,
        "can_cancel": current in CANCELLABLE_STATUSES,
        **placed.shown,
        "courier": None if courier is None else {"id": courier_id, "name": courier},
        "timeline": timeline(current, periods),
        "position": (
            {"lat": position.lat, "lon": position.lon, "at": iso_ms(position.at)}
            if position
            else None
        ),
        "path": path,
        "distance_left_km": None if distance is None else round(distance, 3),
        "eta": arrival(trip, now),
        "tracking": source,
    }


def order_summary(state: OrderState) -> dict[str, Any]:
    """An order as the lists show it, from its Pinot row."""
    return {
        "id": state.order_id,
        "status": state.status,
        "status_label": status_label(state.status),
        "status_time": iso_ms(state.status_time),
        "is_active": state.is_active,
        "created_at": iso_ms(state.created_at),
        "total": money(state.total),
        "item_count": state.item_count,
        "items": [{"name": i.get("name"), "quantity": i.get("quantity")} for i in state.items],
        "restaurant": {"id": state.restaurant_id, "name": state.restaurant_name},
        "customer": {"id": state.customer_id, "name": state.customer_name},
        "distance_left_km": state.distance_left_km,
        "eta": arrival(eta.Trip.of_enriched(state), prediction_clock()),
        "version": state.version,
    }


def deliveries_in_area(points: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Deliveries in transit whose courier is inside the polygon of (lon, lat) ``points``,
    newest position first, each with the arrival its order's page shows (same state, same
    clock; null until the pipeline's order record is readable)."""
    positions = selectors.deliveries_in_area(points)
    states = selectors.order_states(p.order_id for p in positions)
    now = prediction_clock()
    return [
        {
            "order_id": p.order_id,
            "courier_id": p.courier_id,
            "status": p.status,
            "lat": p.lat,
            "lon": p.lon,
            "at": p.at,
            "distance_left_km": p.distance_left_km,
            "eta": arrival(eta.Trip.of_enriched(state), now)
            if (state := states.get(p.order_id)) is not None
            else None,
        }
        for p in positions
    ]

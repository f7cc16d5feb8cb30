"""What a client is shown of an order: the one read model under REST and WebSocket.

Each function returns a typed shape (:mod:`tracker.tracking.shapes`) that every channel
renders with :func:`tracker.tracking.serializers.to_json`, so a client sees the same
order whichever channel it asks. A new channel (a kitchen board, a mobile push) calls
these functions instead of rebuilding the shape. The reads are the selectors'; what a
process caches of them is :mod:`tracker.cache.reads`'; this module only shapes.
"""

from __future__ import annotations

from contract.events import (
    CANCELLABLE_STATUSES,
    LIFECYCLE,
    TERMINAL_STATUSES,
    OrderStatus,
    epoch_ms,
    now_ms,
    status_label,
)
from tracker.cache import reads
from tracker.orders import policy
from tracker.orders.models import Order
from tracker.tracking import eta, selectors
from tracker.tracking.selectors import OrderState, StatusPeriod, records
from tracker.tracking.selectors.records import millis
from tracker.tracking.shapes import (
    Arrival,
    DeliveryInArea,
    EtaBasis,
    Millis,
    Named,
    OrderDetail,
    OrderSummary,
    PlacedOrder,
    Point,
    SummaryItem,
    TimelineStep,
    TrackingSource,
)

#: Reads predict the arrival as of the clock rounded down to this step, so one order reads
#: the same for that long and a conditional request can answer 304 (its ``computed_at``
#: says when; pushed updates predict as of the moment they are sent).
PREDICTION_STEP_MS = 30_000


def prediction_clock() -> int:
    now = now_ms()
    return now - now % PREDICTION_STEP_MS


def arrival(trip: eta.Trip, now: int) -> Arrival | None:
    """The predicted arrival with its range and what it rests on (None once delivered or
    cancelled), from the process's cached statistics: no query of its own."""
    prediction = eta.predict(trip, eta.current_statistics(), now)
    if prediction is None:
        return None
    basis = prediction.basis
    return Arrival(
        prediction.arrives_at, prediction.earliest, prediction.latest, prediction.computed_at,
        EtaBasis(
            basis.get("kitchen"), basis.get("kitchen_samples"), basis.get("speed"),
            basis.get("speed_kmh"), basis.get("route_factor"), basis.get("route_km_left"),
            basis.get("stats_as_of"),
        ),
    )  # fmt: skip


def timeline(current: str, periods: list[StatusPeriod]) -> tuple[TimelineStep, ...]:
    """The seven lifecycle steps (plus CANCELLED when cancelled), each done/current/pending.

    The step still going on has no duration (it would change with every read, and so would
    the answer's ETag): a client counts from its ``entered_at``."""
    entered = {p.status: p for p in periods}
    cancelled = current == OrderStatus.CANCELLED
    steps = []
    for status in [*LIFECYCLE, *([OrderStatus.CANCELLED] if cancelled else [])]:
        period, label = entered.get(status.value), status_label(status)
        if period is None:
            state = "skipped" if cancelled else "pending"
            steps.append(TimelineStep(status.value, label, state, None, None, None))
            continue
        end = period.left_at
        steps.append(
            TimelineStep(
                status.value, label, "current" if status.value == current else "done",
                period.entered_at, end,
                None if end is None else round((end - period.entered_at) / 1000, 1),
            )
        )  # fmt: skip
    return tuple(steps)


def order_detail(order_id: int, *, viewer: policy.Actor) -> OrderDetail:
    """The order as ``viewer`` is shown it (NotVisible, like a missing order, when they may
    not see it: :func:`tracker.orders.policy.can_see`, asked on every read).

    Items, restaurant and total from the system of record; status, timeline, courier,
    position and ETA from Pinot. Until the pipeline has seen a new order (about a
    second), its status and courier come from the database and ``tracking.source`` says so.
    """
    placed = reads.placed_order(order_id)
    if placed is None or not policy.can_see(viewer, order_id, placed.customer_user_id):
        raise policy.NotVisible(order_id)
    state = reads.order_state(order_id)
    if state is None:
        return _as_recorded(placed, records.recorded_order(order_id))
    position = state.courier
    return _shown(
        placed,
        current=state.status,
        status_time=state.status_time,
        periods=selectors.status_periods(_entered_from_pinot(order_id, state).items()),
        courier_id=state.courier_id,
        position=None if position is None else Point(position.lat, position.lon, position.at),
        path=()
        if position is None
        else reads.trail(
            order_id, position.at, ended_at=None if state.is_active else state.updated_at
        ),
        distance=state.distance_left_km,
        trip=eta.Trip.of_enriched(state),
        source=TrackingSource("pinot", state.version, state.updated_at),
    )


def _entered_from_pinot(order_id: int, state: OrderState) -> dict[str, int]:
    """Entry times: the latest record's per-status columns. Only a record that lacks its
    own current status time (written by an older job) costs a history query."""
    entered = dict(state.status_times)
    if state.status not in entered:
        entered = {p.status: p.entered_at for p in selectors.order_status_history(order_id)}
        entered.update(state.status_times)
    return entered


def detail_as_written(order: Order) -> OrderDetail:
    """The detail of ``order`` as a command has just written it, for the caller the command
    authorised (no second access check), from the database alone: a command that succeeded
    must not answer 503 because the read side is down."""
    placed = reads.placed_order(order.pk)
    if placed is None:
        raise policy.NotVisible(order.pk)
    return _as_recorded(placed, order)


def _as_recorded(placed: PlacedOrder, order: Order) -> OrderDetail:
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
        path=(),
        distance=None,
        trip=eta.Trip.of_order(order, order.status, status_time),
        source=TrackingSource("database", 0, millis(order.updated_at)),
    )


def _shown(
    placed: PlacedOrder,
    *,
    current: str,
    status_time: Millis,
    periods: list[StatusPeriod],
    courier_id: int | None,
    position: Point | None,
    path: tuple[Point, ...],
    distance: float | None,
    trip: eta.Trip,
    source: TrackingSource,
) -> OrderDetail:
    """The detail's one shape, whichever store the changing parts came from."""
    if not periods:  # the pipeline has not caught up: the database's own history
        periods = records.recorded_periods(placed.id)
    courier = reads.courier_name(courier_id) if courier_id is not None else None
    return OrderDetail(
        id=placed.id,
        status=current,
        status_label=status_label(current),
        status_time=status_time,
        is_active=current not in TERMINAL_STATUSES,
        can_cancel=current in CANCELLABLE_STATUSES,
        created_at=placed.created_at,
        total=placed.total,
        items=placed.items,
        restaurant=placed.restaurant,
        customer=placed.customer,
        delivery=placed.delivery,
        courier=None if courier is None else Named(courier_id, courier),
        timeline=timeline(current, periods),
        position=position,
        path=path,
        distance_left_km=None if distance is None else round(distance, 3),
        eta=arrival(trip, prediction_clock()),
        tracking=source,
    )


def order_summary(state: OrderState) -> OrderSummary:
    """An order as the lists show it, from its Pinot row."""
    return OrderSummary(
        id=state.order_id,
        status=state.status,
        status_label=status_label(state.status),
        status_time=state.status_time,
        is_active=state.is_active,
        created_at=state.created_at,
        total=state.total,
        item_count=state.item_count,
        items=tuple(SummaryItem(i.get("name"), i.get("quantity")) for i in state.items),
        restaurant=Named(state.restaurant_id, state.restaurant_name),
        customer=Named(state.customer_id, state.customer_name),
        distance_left_km=state.distance_left_km,
        eta=arrival(eta.Trip.of_enriched(state), prediction_clock()),
        version=state.version,
    )


def deliveries_in_area(points: list[tuple[float, float]]) -> list[DeliveryInArea]:
    """Deliveries in transit whose courier is inside the polygon of (lon, lat) ``points``,
    newest position first, each with the arrival its order's page shows (same state, same
    clock; null until the pipeline's order record is readable)."""
    positions = selectors.deliveries_in_area(points)
    states = selectors.order_states(p.order_id for p in positions)
    now = prediction_clock()
    return [
        DeliveryInArea(
            p.order_id,
            p.courier_id,
            p.status,
            p.lat,
            p.lon,
            p.at,
            p.distance_left_km,
            arrival(eta.Trip.of_enriched(state), now)
            if (state := states.get(p.order_id)) is not None
            else None,
        )  # fmt: skip
        for p in positions
    ]

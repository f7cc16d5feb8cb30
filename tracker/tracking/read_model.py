"""What a client is shown of an order: the one read model under REST and WebSocket.

Each function returns a typed shape (:mod:`tracker.tracking.shapes`) that every channel
renders with :func:`tracker.tracking.serializers.to_json`, so a client sees the same
order whichever channel it asks. A new channel (a kitchen board, a mobile push) calls
these functions instead of rebuilding the shape. The reads are the selectors'; what a
process caches of them is :mod:`tracker.cache.reads`'; this module only shapes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from contract.events import (
    CANCELLABLE_STATUSES,
    LIFECYCLE,
    TERMINAL_STATUSES,
    OrderEnriched,
    OrderStatus,
    epoch_ms,
    now_ms,
    status_label,
    status_time_field,
)
from tracker.cache import reads
from tracker.orders import policy
from tracker.orders.models import Order
from tracker.tracking import eta, selectors
from tracker.tracking.selectors import OrderState, StatusPeriod, records
from tracker.tracking.selectors.records import millis
from tracker.tracking.serializers import SHAPES_VERSION
from tracker.tracking.shapes import (
    Arrival,
    DeliveryInArea,
    EtaBasis,
    Millis,
    Named,
    OrderDetail,
    OrderSummary,
    OrderUpdate,
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
    """The wall clock (epoch ms, as :func:`contract.events.now_ms`) rounded down to the step."""
    now = time.time_ns() // 1_000_000
    return now - now % PREDICTION_STEP_MS


def arrival(trip: eta.Trip, now: int, statistics: eta.Statistics | None = None) -> Arrival | None:
    """The predicted arrival with its range and what it rests on (None once delivered or
    cancelled), from ``statistics`` or the process's cached ones: no query of its own."""
    prediction = eta.predict(trip, statistics or eta.current_statistics(), now)
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


@dataclass(frozen=True, slots=True)
class DetailSource:
    """What an order's detail is built from, read before it is built: from the cache while
    nothing changed, so a conditional read that matches costs no building at all.

    ``content`` names everything the body depends on (the order's placed part, its
    state's version and position, the trail's length, the courier's name, and for an
    order still on its way the prediction's clock step and statistics), so equal
    ``content`` means an equal body; ``etag`` adds who asks."""

    placed: PlacedOrder
    state: OrderState | None  # None: the pipeline has not seen the order yet
    recorded: Order | None  # the database's row, when ``state`` is None
    path: tuple[Point, ...]
    courier: str | None
    clock: int
    statistics: eta.Statistics | None  # None: the order is finished, nothing is predicted
    content: str
    etag: str


def detail_source(order_id: int, *, viewer: policy.Actor) -> DetailSource:
    """What the detail of the order ``viewer`` asks for is built from, and its validators
    (NotVisible, like a missing order, when they may not see it:
    :func:`tracker.orders.policy.can_see`, asked on every read, before any validator)."""
    placed = reads.placed_order(order_id)
    if placed is None or not policy.can_see(viewer, order_id, placed.customer_user_id):
        raise policy.NotVisible(order_id)
    state = reads.order_state(order_id)
    recorded = records.recorded_order(order_id) if state is None else None
    if state is not None:  # its fields, not its properties: this runs on every read
        at, courier_id = state.location_time, state.courier_id
        active = state.status not in TERMINAL_STATUSES
        path = (
            ()
            if at is None
            else reads.trail(order_id, at, ended_at=None if active else state.event_time)
        )
        changed = ("pinot", state.version, at, len(path), path[-1].at if path else None)
    else:
        courier_id, active, path = recorded.courier_id, recorded.status not in TERMINAL_STATUSES, ()
        changed = (
            "database",
            recorded.status,
            courier_id,
            millis(recorded.updated_at),
            epoch_ms(recorded.status_changed_at),
        )
    courier = reads.courier_name(courier_id) if courier_id is not None else None
    # A finished order shows no prediction: neither the clock nor the statistics move it.
    clock, statistics = (prediction_clock(), eta.current_statistics()) if active else (0, None)
    predicted = (clock, statistics.as_of) if active else None
    content = _digest(repr((SHAPES_VERSION, placed, changed, courier, predicted)))
    return DetailSource(
        placed, state, recorded, path, courier, clock, statistics, content,
        etag=_digest(f"{content}|{viewer_key(viewer)}"),
    )  # fmt: skip


def viewer_key(viewer: policy.Actor) -> str:
    """Who asks, as validators tell viewers apart: a user, a link's holder, the system."""
    if isinstance(viewer, policy.LinkHolder):
        return f"link:{viewer.order_id}"
    return f"user:{getattr(viewer, 'pk', None)}"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def order_detail(order_id: int, *, viewer: policy.Actor) -> OrderDetail:
    """The order as ``viewer`` is shown it (NotVisible, like a missing order, when they may
    not see it: :func:`tracker.orders.policy.can_see`, asked on every read).

    Items, restaurant and total from the system of record; status, timeline, courier,
    position and ETA from Pinot. Until the pipeline has seen a new order (about a
    second), its status and courier come from the database and ``tracking.source`` says so.
    """
    return detail_from(detail_source(order_id, viewer=viewer))


def detail_from(source: DetailSource) -> OrderDetail:
    """The detail built from what :func:`detail_source` read."""
    placed, state = source.placed, source.state
    if state is None:
        return _as_recorded(placed, source.recorded, source)
    position = state.courier
    return _shown(
        placed,
        current=state.status,
        status_time=state.status_time,
        periods=selectors.status_periods(_entered_from_pinot(placed.id, state).items()),
        courier_id=state.courier_id,
        position=None if position is None else Point(position.lat, position.lon, position.at),
        path=source.path,
        distance=state.distance_left_km,
        trip=eta.Trip.of_enriched(state),
        source=TrackingSource("pinot", state.version, state.updated_at),
        shown=source,
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


def _as_recorded(
    placed: PlacedOrder, order: Order, shown: DetailSource | None = None
) -> OrderDetail:
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
        shown=shown,
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
    shown: DetailSource | None = None,
) -> OrderDetail:
    """The detail's one shape, whichever store the changing parts came from; with
    ``shown``, exactly what its validators name (its courier's name, clock, statistics)."""
    if not periods:  # the pipeline has not caught up: the database's own history
        periods = records.recorded_periods(placed.id)
    if shown is not None:
        courier, clock, statistics = shown.courier, shown.clock, shown.statistics
    else:
        courier = reads.courier_name(courier_id) if courier_id is not None else None
        clock, statistics = prediction_clock(), None
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
        eta=arrival(trip, clock, statistics),
        tracking=source,
    )


def order_update(event: OrderEnriched, status_changed: bool) -> OrderUpdate:
    """An order's pushed ``update`` from one orders_enriched record (its full state),
    predicting the arrival as of the moment it is sent."""
    reached = ((s.value, getattr(event, status_time_field(s))) for s in OrderStatus)
    has_point = event.courier_lat is not None and event.location_time is not None
    return OrderUpdate(
        kind="status" if status_changed else "position",
        order_id=event.order_id,
        customer_id=event.customer_id,
        restaurant_id=event.restaurant_id,
        version=event.version,
        status=event.status,
        status_label=status_label(event.status),
        status_time=event.status_time,
        status_times={status: at for status, at in reached if at is not None},
        position=Point(event.courier_lat, event.courier_lon, event.location_time)
        if has_point
        else None,
        distance_left_km=None
        if event.distance_left_km is None
        else round(event.distance_left_km, 3),
        eta=arrival(eta.Trip.of_enriched(event), now_ms()),
        total=event.total,
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


#: A list's newest change that its page does not show is taken to be in Pinot this long
#: after the bridge read it (Pinot ingests within about a second), so a page read before
#: that is tagged by its body's hash instead (:func:`list_is_current`).
SETTLE_MS = 3_000


@dataclass(frozen=True, slots=True)
class ListValidator:
    """A list's validator, known before Pinot is asked: the newest change the bridge
    registered in each of the list's scopes, the query, the clock step, the statistics'
    as-of, the shapes' version and who asks."""

    run: reads.Run
    stamps: dict[str, reads.Stamp | None]
    etag: str


def list_validator(
    scope: dict, query: list[tuple[str, list[str]]], *, viewer: policy.Actor
) -> ListValidator | None:
    """The validator of the list ``scope`` (:func:`tracker.orders.policy.list_scope`)
    answers ``query`` (the request's parameters) with; None when the register cannot
    say (no live bridge run, or a courier's list, which is not registered)."""
    if "customer_id" in scope:
        scopes = [f"customer:{scope['customer_id']}"]
    elif "restaurant_ids" in scope:
        scopes = [f"restaurant:{r}" for r in scope["restaurant_ids"]]
    elif not scope:
        scopes = ["all"]
    else:  # a courier's orders: a set the database moves (reassignments, the grace)
        return None
    found = reads.scope_stamps(scopes)
    if found is None:
        return None
    run, stamps = found
    shown = (SHAPES_VERSION, run.id, sorted(scope.items()), sorted(stamps.items()), sorted(query),
             prediction_clock(), eta.current_statistics().as_of, viewer_key(viewer))  # fmt: skip
    return ListValidator(run, stamps, _digest(repr(shown)))


def list_is_current(validator: ListValidator, rows: list[OrderState]) -> bool:
    """Whether ``rows``, just read from Pinot, show every change ``validator`` names: no
    listed order older than its registered version, each scope's newest change listed at
    least as new, or (on another page, or not in Pinot yet) :data:`SETTLE_MS` old."""
    now, shown = reads.now(), {row.order_id: row.version for row in rows}
    registered = reads.registered_many(shown, validator.run.id)
    if registered is None or any(v > shown[o] for o, v in registered.items()):
        return False
    for stamp in validator.stamps.values():
        if stamp is None:  # no change since the run started: settled once it is old enough
            if now - validator.run.started < SETTLE_MS:
                return False
            continue
        at, order, version = stamp
        if shown.get(order, -1) < version and (order in shown or now - at < SETTLE_MS):
            return False
    return True


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

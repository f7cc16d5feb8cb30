"""The order join as a pure function of (state, events): no Spark, no Kafka, no clock.

Every Spark flavour of the job (driver-side state, ``applyInPandasWithState``)
calls :func:`apply_events` per order id, so the lifecycle rules are unit-tested
here once and cannot drift between execution strategies.

State of one order is a plain JSON-able ``dict`` (see :func:`new_state`) so it
can live in a Spark state store column, a SQLite row or a test variable alike.

Rules, all decided by event content, never by arrival order:

* ``orders``: the first valid ``OrderPlaced`` defines the order; repeats are no-ops.
* ``order_statuses``: the first time each status is seen is recorded
  (``<status>_at``); the *current* status is the reached status with the highest
  lifecycle rank, so a late ``ORDER_CONFIRMED`` fills in its time without moving
  an order that is already ``BEING_COOKED`` backwards. A cancel after the food
  left, or a status later than a cancel, is refused (dead letter).
* ``delivery_locations``: a point is accepted only if it is newer (event time)
  than the latest accepted point; duplicates and stragglers are no-ops.
* events of an order not seen yet are buffered in its state and expire after
  ``buffer_ttl_ms`` of processing time (dead letter "order never arrived").
* finished orders stay ``done_ttl_ms`` so late duplicates remain no-ops, then
  are evicted.

Versions: ``version`` counts accepted changes (buffered ones included), so it is
monotonic per order and, because the state survives broker restarts in the
checkpoint, a replay of the same topics adds no version. Intermediate versions
may differ in content only if a *fresh* reprocess interleaves the three topics
differently; the final record is identical (set semantics for statuses,
per-partition order for locations). Output ``event_id`` is a UUID5 of (topic,
order id, version/line) so a re-emitted record is byte-identical.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tracker.core import geo
from tracker.core.events import (
    CANCELLABLE_STATUSES,
    IN_TRANSIT_STATUSES,
    DeadLetter,
    DeliveryLocation,
    DeliveryStatus,
    Event,
    EventValidationError,
    OrderEnriched,
    OrderItem,
    OrderItemEnriched,
    OrderPlaced,
    OrderStatus,
    OrderStatusChanged,
    Topic,
    parse_event,
    status_rank,
    status_time_field,
)

#: Namespace for deterministic output event ids (uuid5).
OUTPUT_NAMESPACE = uuid.UUID("8f4b6a36-5d0c-4d55-9a43-2b7f0c7e8c11")

DEFAULT_BUFFER_TTL_MS = 10 * 60 * 1000
DEFAULT_DONE_TTL_MS = 60 * 60 * 1000


@dataclass(frozen=True)
class SourceRecord:
    """One raw Kafka message of a *logical* source topic."""

    topic: Topic
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0


@dataclass(frozen=True)
class ParsedEvent:
    """A validated event with the coordinates of the message it came from."""

    event: Event
    record: SourceRecord


@dataclass(frozen=True)
class Output:
    """A message to produce: logical topic, key and serialised value."""

    topic: Topic
    key: bytes | None
    value: bytes

    def decoded(self) -> dict[str, Any]:
        return json.loads(self.value)


@dataclass
class JoinResult:
    """What :func:`apply_events` decided for one order."""

    state: dict[str, Any] | None
    outputs: list[Output] = field(default_factory=list)
    changed: bool = False


def dead_letter(record: SourceRecord, reason: str) -> Output:
    """A dead-letter output for ``record`` (keyed as the source message was)."""
    dl = DeadLetter.for_message(
        topic=record.topic.value,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        reason=reason,
    )
    return Output(Topic.DEAD_LETTERS, record.key, dl.to_json())


def parse_record(record: SourceRecord) -> ParsedEvent | Output:
    """Validate one message: the event, or a dead letter naming the field at fault."""
    try:
        event = parse_event(record.topic, record.value)
    except EventValidationError as exc:
        return dead_letter(record, f"invalid {exc.field}: {exc.reason}")
    return ParsedEvent(event, record)


def new_state(order_id: int) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "order": None,  # OrderPlaced.to_dict() once known
        "statuses": {},  # status -> event_time it was entered
        "courier_id": None,
        "location": None,  # {"lat", "lon", "time", "courier_id"}
        "version": 0,
        "change_time": None,  # event_time of the change that made `version`
        "buffered": [],  # raw coordinates of events held before their order
        "buffered_since": None,  # processing time of the first buffered event
        "done_since": None,  # processing time the order became terminal
    }


def _current_status(state: dict[str, Any]) -> str | None:
    if not state["statuses"]:
        return None
    return max(state["statuses"], key=status_rank)


def _raw(record: SourceRecord) -> dict[str, Any]:
    return {
        "topic": record.topic.value,
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key.decode("latin-1") if record.key is not None else None,
        "value": (record.value or b"").decode("latin-1"),
    }


def _unraw(raw: dict[str, Any]) -> SourceRecord:
    return SourceRecord(
        topic=Topic(raw["topic"]),
        partition=raw["partition"],
        offset=raw["offset"],
        key=raw["key"].encode("latin-1") if raw["key"] is not None else None,
        value=raw["value"].encode("latin-1"),
    )


def _output_id(topic: Topic, order_id: int, seq: int) -> str:
    return str(uuid.uuid5(OUTPUT_NAMESPACE, f"{topic.value}:{order_id}:{seq}"))


def _distance_eta(state: dict[str, Any]) -> tuple[float | None, int | None]:
    loc, order = state["location"], state["order"]
    if loc is None or order is None:
        return None, None
    if _current_status(state) == OrderStatus.DELIVERED:
        return 0.0, 0
    km = geo.haversine_km(loc["lat"], loc["lon"], order["delivery_lat"], order["delivery_lon"])
    return round(km, 4), geo.eta_seconds(km)


def enriched_record(state: dict[str, Any]) -> OrderEnriched:
    """The ``orders_enriched`` record for the current state (order must be known)."""
    order = state["order"]
    status = _current_status(state) or OrderStatus.PLACED_ORDER.value
    statuses = state["statuses"]
    loc = state["location"]
    distance, eta = _distance_eta(state)
    items = [OrderItem(**item) for item in order["items"]]
    times = {status_time_field(s): t for s, t in statuses.items()}
    return OrderEnriched(
        event_id=_output_id(Topic.ORDERS_ENRICHED, state["order_id"], state["version"]),
        event_time=state["change_time"],
        order_id=state["order_id"],
        version=state["version"],
        customer_id=order["customer_id"],
        customer_name=order["customer_name"],
        restaurant_id=order["restaurant_id"],
        restaurant_name=order["restaurant_name"],
        restaurant_lat=order["restaurant_lat"],
        restaurant_lon=order["restaurant_lon"],
        delivery_lat=order["delivery_lat"],
        delivery_lon=order["delivery_lon"],
        items=items,
        item_count=sum(item.quantity for item in items),
        total=float(order["total"]),
        status=status,
        status_time=statuses.get(status, order["event_time"]),
        created_at=order["event_time"],
        courier_id=state["courier_id"],
        courier_lat=loc["lat"] if loc else None,
        courier_lon=loc["lon"] if loc else None,
        location_time=loc["time"] if loc else None,
        distance_left_km=distance,
        eta_seconds=eta,
        **times,
    )


def delivery_status_record(state: dict[str, Any]) -> DeliveryStatus:
    """The ``delivery_statuses`` record for the latest courier point of an order in transit."""
    order, loc = state["order"], state["location"]
    distance, eta = _distance_eta(state)
    return DeliveryStatus(
        event_id=_output_id(Topic.DELIVERY_STATUSES, state["order_id"], state["version"]),
        event_time=loc["time"],
        order_id=state["order_id"],
        version=state["version"],
        customer_id=order["customer_id"],
        restaurant_id=order["restaurant_id"],
        courier_id=loc["courier_id"],
        status=_current_status(state),
        lat=loc["lat"],
        lon=loc["lon"],
        destination_lat=order["delivery_lat"],
        destination_lon=order["delivery_lon"],
        distance_left_km=distance,
        eta_seconds=eta,
    )


def item_records(state: dict[str, Any]) -> list[OrderItemEnriched]:
    """One ``order_items_enriched`` row per order line (line numbers from 1)."""
    order = state["order"]
    rows = []
    for line, item in enumerate(order["items"], start=1):
        price = float(item["unit_price"])
        rows.append(
            OrderItemEnriched(
                event_id=_output_id(Topic.ORDER_ITEMS_ENRICHED, state["order_id"], line),
                event_time=order["event_time"],
                order_id=state["order_id"],
                line=line,
                customer_id=order["customer_id"],
                restaurant_id=order["restaurant_id"],
                restaurant_name=order["restaurant_name"],
                product_id=item["product_id"],
                product_name=item["name"],
                category=item["category"],
                quantity=item["quantity"],
                unit_price=price,
                line_total=round(price * item["quantity"], 2),
            )
        )
    return rows


def _emit(out: list[Output], record: Event) -> None:
    out.append(Output(record.TOPIC, record.key(), record.to_json()))


def _in_transit(state: dict[str, Any]) -> bool:
    return _current_status(state) in IN_TRANSIT_STATUSES


def _location_in_trip(state: dict[str, Any]) -> bool:
    """Whether the latest point was taken after the order left (so it belongs on the map)."""
    loc = state["location"]
    left = state["statuses"].get(OrderStatus.OUT_FOR_DELIVERY.value)
    return loc is not None and left is not None and loc["time"] >= left


def _apply_status(state: dict[str, Any], ev: OrderStatusChanged) -> str | None:
    """Apply a status event; returns a refusal reason, or None (accepted or no-op via 'dup')."""
    statuses = state["statuses"]
    if ev.status in statuses:
        return "dup"
    cancelled_at = statuses.get(OrderStatus.CANCELLED.value)
    if ev.status == OrderStatus.CANCELLED:
        reached = [s for s in statuses if OrderStatus(s) not in CANCELLABLE_STATUSES]
        if reached:
            worst = max(reached, key=status_rank)
            return f"cannot cancel order {ev.order_id}: it is already {worst}"
    elif cancelled_at is not None and ev.event_time > cancelled_at:
        return f"order {ev.order_id} was cancelled before it became {ev.status}"
    statuses[ev.status] = ev.event_time
    if ev.courier_id is not None:
        state["courier_id"] = ev.courier_id
    return None


def _apply_location(state: dict[str, Any], ev: DeliveryLocation) -> bool:
    loc = state["location"]
    if loc is not None and ev.event_time <= loc["time"]:
        return False
    state["location"] = {
        "lat": ev.lat,
        "lon": ev.lon,
        "time": ev.event_time,
        "courier_id": ev.courier_id,
    }
    if state["courier_id"] is None:
        state["courier_id"] = ev.courier_id
    return True


def _event_sort_key(p: ParsedEvent) -> tuple[int, int, int]:
    # Orders first (they unlock everything), then by event time, then lifecycle rank.
    ev = p.event
    kind = 0 if isinstance(ev, OrderPlaced) else 1
    rank = status_rank(ev.status) if isinstance(ev, OrderStatusChanged) else 0
    return (kind, ev.event_time, rank)


def apply_events(
    state: dict[str, Any] | None,
    events: Iterable[ParsedEvent],
    now_ms: int,
    *,
    buffer_ttl_ms: int = DEFAULT_BUFFER_TTL_MS,
    done_ttl_ms: int = DEFAULT_DONE_TTL_MS,
) -> JoinResult:
    """Fold one order's new events into its state; return the new state and the outputs.

    ``state`` is not mutated (a re-run of a failed batch starts from the same
    input). ``events`` must all belong to one order id; they are applied in
    event-time order so a batch's arrival order never matters. Returns
    ``state=None`` when the order should be dropped from the state store.
    """
    events = sorted(events, key=_event_sort_key)
    if state is None:
        if not events:
            return JoinResult(None)
        state = new_state(events[0].event.order_id)
    else:
        state = json.loads(json.dumps(state))  # deep copy of a JSON-able dict
    out: list[Output] = []
    changed = False

    for p in events:
        ev = p.event
        before_transit = state["order"] is not None and _location_in_trip(state)
        if isinstance(ev, OrderPlaced):
            if state["order"] is not None:
                continue  # duplicate: the first OrderPlaced defines the order
            state["order"] = ev.to_dict()
            state["statuses"].setdefault(OrderStatus.PLACED_ORDER.value, ev.event_time)
        elif isinstance(ev, OrderStatusChanged):
            refusal = _apply_status(state, ev)
            if refusal == "dup":
                continue
            if refusal is not None:
                out.append(dead_letter(p.record, refusal))
                continue
        elif isinstance(ev, DeliveryLocation):
            if not _apply_location(state, ev):
                continue
        else:  # pragma: no cover - parse_record only yields source events
            out.append(dead_letter(p.record, f"unexpected event type {type(ev).__name__}"))
            continue
        changed = True
        state["version"] += 1
        state["change_time"] = ev.event_time
        if state["order"] is None:
            state["buffered"].append(_raw(p.record))
            if state["buffered_since"] is None:
                state["buffered_since"] = now_ms
            continue
        if isinstance(ev, OrderPlaced):
            state["buffered"] = []
            state["buffered_since"] = None
            # Buffered changes may be newer than the order event itself.
            times = [*state["statuses"].values(), ev.event_time]
            if state["location"] is not None:
                times.append(state["location"]["time"])
            state["change_time"] = max(times)
        _emit(out, enriched_record(state))
        if isinstance(ev, OrderPlaced):
            for row in item_records(state):
                _emit(out, row)
        # A courier point goes on the map when it is new and the order is on the road
        # (including a point that arrived just before its OUT_FOR_DELIVERY status).
        new_point = isinstance(ev, DeliveryLocation) or (
            not before_transit and _location_in_trip(state)
        )
        if new_point and _in_transit(state) and _location_in_trip(state):
            _emit(out, delivery_status_record(state))

    status = _current_status(state)
    if (
        state["order"] is not None
        and status
        in (
            OrderStatus.DELIVERED.value,
            OrderStatus.CANCELLED.value,
        )
        and state["done_since"] is None
    ):
        state["done_since"] = now_ms
        changed = True
    return _expire(state, out, changed, now_ms, buffer_ttl_ms, done_ttl_ms)


def _expire(
    state: dict[str, Any],
    out: list[Output],
    changed: bool,
    now_ms: int,
    buffer_ttl_ms: int,
    done_ttl_ms: int,
) -> JoinResult:
    since = state["buffered_since"]
    if state["order"] is None and since is not None and now_ms - since >= buffer_ttl_ms:
        for raw in state["buffered"]:
            reason = f"order {state['order_id']} never arrived within {buffer_ttl_ms} ms"
            out.append(dead_letter(_unraw(raw), reason))
        return JoinResult(None, out, True)
    if state["done_since"] is not None and now_ms - state["done_since"] >= done_ttl_ms:
        return JoinResult(None, out, True)
    if state["order"] is None and not state["buffered"]:
        return JoinResult(None, out, changed)
    return JoinResult(state, out, changed)


def expire_only(
    state: dict[str, Any],
    now_ms: int,
    *,
    buffer_ttl_ms: int = DEFAULT_BUFFER_TTL_MS,
    done_ttl_ms: int = DEFAULT_DONE_TTL_MS,
) -> JoinResult:
    """Time passed with no events: drop expired buffers / finished orders."""
    return _expire(json.loads(json.dumps(state)), [], False, now_ms, buffer_ttl_ms, done_ttl_ms)


def next_expiry(
    state: dict[str, Any],
    *,
    buffer_ttl_ms: int = DEFAULT_BUFFER_TTL_MS,
    done_ttl_ms: int = DEFAULT_DONE_TTL_MS,
) -> int | None:
    """Processing time at which :func:`expire_only` would drop this state (None: never)."""
    if state["order"] is None and state["buffered_since"] is not None:
        return state["buffered_since"] + buffer_ttl_ms
    if state["done_since"] is not None:
        return state["done_since"] + done_ttl_ms
    return None


@dataclass
class BatchResult:
    """Outcome of :func:`process_batch`: new states by order id (None = delete), outputs."""

    states: dict[int, dict[str, Any] | None]
    outputs: list[Output]


def order_id_of(parsed: ParsedEvent) -> int:
    return parsed.event.order_id


def process_batch(
    states: dict[int, dict[str, Any]],
    records: Iterable[SourceRecord],
    now_ms: int,
    *,
    buffer_ttl_ms: int = DEFAULT_BUFFER_TTL_MS,
    done_ttl_ms: int = DEFAULT_DONE_TTL_MS,
    expiry_candidates: Iterable[int] = (),
) -> BatchResult:
    """Parse, group by order id and join a micro-batch against ``states`` (not mutated).

    ``expiry_candidates`` are order ids without new events whose TTL may have
    passed (the caller tracks them cheaply); their expiry is applied too.
    Returned ``states`` holds only the orders that changed.
    """
    outputs: list[Output] = []
    by_order: dict[int, list[ParsedEvent]] = {}
    for record in records:
        parsed = parse_record(record)
        if isinstance(parsed, Output):
            outputs.append(parsed)
        else:
            by_order.setdefault(parsed.event.order_id, []).append(parsed)
    changed: dict[int, dict[str, Any] | None] = {}
    for order_id in sorted(by_order):
        result = apply_events(
            states.get(order_id),
            by_order[order_id],
            now_ms,
            buffer_ttl_ms=buffer_ttl_ms,
            done_ttl_ms=done_ttl_ms,
        )
        outputs.extend(result.outputs)
        if result.changed or (result.state is None and order_id in states):
            changed[order_id] = result.state
    for order_id in expiry_candidates:
        if order_id in by_order or order_id not in states:
            continue
        result = expire_only(
            states[order_id], now_ms, buffer_ttl_ms=buffer_ttl_ms, done_ttl_ms=done_ttl_ms
        )
        outputs.extend(result.outputs)
        if result.state is None:
            changed[order_id] = None
    return BatchResult(changed, outputs)

"""Unit tests of the pure order join (no Spark, no Kafka)."""

from __future__ import annotations

import base64
import itertools
import json
import uuid

import pytest

from streaming import join
from tracker.core import geo
from tracker.core.events import (
    LIFECYCLE,
    DeliveryLocation,
    OrderPlaced,
    OrderStatus,
    OrderStatusChanged,
    Topic,
    now_ms,
    status_time_field,
)

T0 = now_ms() - 3_600_000
SHOP = (12.9716, 77.5946)
HOME = (12.9352, 77.6245)
_offsets = itertools.count()


def record(event, topic: Topic | None = None) -> join.SourceRecord:
    return join.SourceRecord(
        topic=topic or event.TOPIC,
        partition=0,
        offset=next(_offsets),
        key=event.key(),
        value=event.to_json(),
    )


def raw(topic: Topic, value: bytes, key: bytes | None = b"1") -> join.SourceRecord:
    return join.SourceRecord(topic=topic, partition=1, offset=next(_offsets), key=key, value=value)


def placed(order_id: int = 1, t: int = T0) -> OrderPlaced:
    return OrderPlaced.from_dict(
        {
            "event_id": str(uuid.uuid4()),
            "event_time": t,
            "order_id": order_id,
            "customer_id": 7,
            "customer_name": "Ada",
            "restaurant_id": 3,
            "restaurant_name": "Pizza Shop",
            "restaurant_lat": SHOP[0],
            "restaurant_lon": SHOP[1],
            "delivery_lat": HOME[0],
            "delivery_lon": HOME[1],
            "items": [
                {
                    "product_id": 11,
                    "name": "Margherita",
                    "category": "pizza",
                    "quantity": 2,
                    "unit_price": "9.50",
                },
                {
                    "product_id": 12,
                    "name": "Cola",
                    "category": "drinks",
                    "quantity": 1,
                    "unit_price": "2.00",
                },
            ],
            "total": "21.00",
        }
    )


def status(s: OrderStatus, t: int, order_id: int = 1, courier: int | None = None):
    return OrderStatusChanged(
        event_id=str(uuid.uuid4()),
        event_time=t,
        order_id=order_id,
        status=s.value,
        courier_id=courier,
    )


def point(t: int, fraction: float, order_id: int = 1, courier: int = 5) -> DeliveryLocation:
    lat, lon = geo.interpolate(*SHOP, *HOME, fraction)
    return DeliveryLocation(
        event_id=str(uuid.uuid4()),
        event_time=t,
        order_id=order_id,
        courier_id=courier,
        lat=lat,
        lon=lon,
    )


class Run:
    """Feeds batches through process_batch, keeping state like the job does."""

    def __init__(self, **ttl) -> None:
        self.states: dict[int, dict] = {}
        self.outputs: list[join.Output] = []
        self.ttl = ttl

    def batch(self, *events, now: int | None = None, records=()) -> list[join.Output]:
        recs = [record(e) for e in events] + list(records)
        now = now if now is not None else now_ms()
        result = join.process_batch(
            self.states, recs, now, expiry_candidates=list(self.states), **self.ttl
        )
        for k, v in result.states.items():
            if v is None:
                self.states.pop(k, None)
            else:
                self.states[k] = v
        self.outputs.extend(result.outputs)
        return result.outputs

    def of(self, topic: Topic) -> list[dict]:
        return [o.decoded() for o in self.outputs if o.topic is topic]


def full_lifecycle(order_id: int = 1) -> list:
    evs: list = [placed(order_id)]
    for i, s in enumerate(LIFECYCLE[1:], start=1):
        evs.append(status(s, T0 + i * 10_000, order_id, courier=5 if i >= 4 else None))
        if s is OrderStatus.OUT_FOR_DELIVERY:
            evs += [point(T0 + i * 10_000 + k * 1000, k / 4, order_id) for k in range(1, 4)]
    return evs


def test_order_placed_emits_enriched_record_and_item_rows():
    run = Run()
    run.batch(placed())
    (enriched,) = run.of(Topic.ORDERS_ENRICHED)
    assert enriched["order_id"] == 1 and enriched["version"] == 1
    assert enriched["status"] == "PLACED_ORDER" and enriched["status_time"] == T0
    assert enriched["placed_order_at"] == T0 and enriched["order_confirmed_at"] is None
    assert enriched["customer_name"] == "Ada" and enriched["restaurant_name"] == "Pizza Shop"
    assert enriched["total"] == 21.0 and enriched["item_count"] == 3
    assert enriched["created_at"] == T0 and enriched["event_time"] == T0
    assert [i["name"] for i in enriched["items"]] == ["Margherita", "Cola"]
    items = run.of(Topic.ORDER_ITEMS_ENRICHED)
    assert [(i["order_id"], i["line"]) for i in items] == [(1, 1), (1, 2)]
    assert items[0]["product_name"] == "Margherita" and items[0]["category"] == "pizza"
    assert items[0]["unit_price"] == 9.5 and items[0]["line_total"] == 19.0
    assert run.of(Topic.DELIVERY_STATUSES) == []


def test_every_status_in_order_one_version_each():
    run = Run()
    run.batch(placed())
    for i, s in enumerate(LIFECYCLE[1:], start=1):
        run.batch(status(s, T0 + i * 1000, courier=5 if i >= 4 else None))
    enriched = run.of(Topic.ORDERS_ENRICHED)
    assert [e["version"] for e in enriched] == list(range(1, len(LIFECYCLE) + 1))
    assert [e["status"] for e in enriched] == [s.value for s in LIFECYCLE]
    last = enriched[-1]
    for i, s in enumerate(LIFECYCLE):
        assert last[status_time_field(s)] == T0 + i * 1000
    assert last["cancelled_at"] is None and last["courier_id"] == 5
    assert last["status_time"] == last["delivered_at"]


def test_courier_points_in_transit_produce_delivery_statuses():
    run = Run()
    run.batch(placed(), status(OrderStatus.OUT_FOR_DELIVERY, T0 + 1000, courier=5))
    run.batch(point(T0 + 2000, 0.25), point(T0 + 3000, 0.5))
    deliveries = run.of(Topic.DELIVERY_STATUSES)
    assert [d["event_time"] for d in deliveries] == [T0 + 2000, T0 + 3000]
    d = deliveries[-1]
    lat, lon = geo.interpolate(*SHOP, *HOME, 0.5)
    expected_km = geo.haversine_km(lat, lon, *HOME)
    assert d["distance_left_km"] == pytest.approx(expected_km, abs=1e-3)
    assert d["eta_seconds"] == geo.eta_seconds(round(expected_km, 4))
    assert (d["destination_lat"], d["destination_lon"]) == HOME
    assert d["courier_id"] == 5 and d["status"] == "OUT_FOR_DELIVERY"
    enriched = run.of(Topic.ORDERS_ENRICHED)[-1]
    assert enriched["version"] == d["version"] == 4
    assert enriched["courier_lat"] == pytest.approx(lat) and enriched["location_time"] == T0 + 3000
    assert enriched["distance_left_km"] == d["distance_left_km"]


def test_delivered_order_has_zero_distance_and_no_more_delivery_statuses():
    run = Run()
    run.batch(*full_lifecycle())
    run.batch(point(T0 + 100_000, 1.0))  # a point after delivery
    last = run.of(Topic.ORDERS_ENRICHED)[-1]
    assert last["status"] == "DELIVERED" and last["distance_left_km"] == 0.0
    assert last["eta_seconds"] == 0
    assert all(d["status"] != "DELIVERED" for d in run.of(Topic.DELIVERY_STATUSES))


def test_out_of_order_statuses_do_not_move_backwards():
    run = Run()
    run.batch(placed())
    run.batch(status(OrderStatus.BEING_COOKED, T0 + 3000))
    run.batch(status(OrderStatus.ORDER_CONFIRMED, T0 + 1000))  # late
    run.batch(status(OrderStatus.BEING_PREPARED, T0 + 2000))  # late
    enriched = run.of(Topic.ORDERS_ENRICHED)
    assert [e["status"] for e in enriched] == ["PLACED_ORDER"] + ["BEING_COOKED"] * 3
    assert [e["version"] for e in enriched] == [1, 2, 3, 4]
    last = enriched[-1]
    assert last["order_confirmed_at"] == T0 + 1000 and last["being_prepared_at"] == T0 + 2000
    assert last["status_time"] == T0 + 3000


def test_arrival_order_within_a_batch_does_not_matter():
    events = full_lifecycle()
    a, b = Run(), Run()
    now = now_ms()
    a.batch(*events, now=now)
    b.batch(*reversed(events), now=now)
    assert a.of(Topic.ORDERS_ENRICHED) == b.of(Topic.ORDERS_ENRICHED)
    assert a.of(Topic.DELIVERY_STATUSES) == b.of(Topic.DELIVERY_STATUSES)
    assert a.states == b.states


def test_duplicates_and_late_points_are_no_ops():
    run = Run()
    events = full_lifecycle()
    run.batch(*events)
    before = (len(run.outputs), json.dumps(run.states))
    assert run.batch(*events) == []  # the whole history again: nothing new
    run.batch(point(T0 + 41_500, 0.3))  # older than the latest accepted point
    assert (len(run.outputs), json.dumps(run.states)) == before


def test_late_point_in_transit_keeps_latest_position():
    run = Run()
    run.batch(placed(), status(OrderStatus.OUT_FOR_DELIVERY, T0 + 1000, courier=5))
    run.batch(point(T0 + 5000, 0.6))
    assert run.batch(point(T0 + 4000, 0.4)) == []
    assert run.states[1]["location"]["time"] == T0 + 5000


def test_events_before_their_order_are_buffered_then_joined():
    run = Run()
    assert run.batch(status(OrderStatus.ORDER_CONFIRMED, T0 + 1000)) == []
    assert run.batch(status(OrderStatus.OUT_FOR_DELIVERY, T0 + 4000, courier=5)) == []
    assert run.batch(point(T0 + 5000, 0.5)) == []
    assert run.states[1]["order"] is None and len(run.states[1]["buffered"]) == 3
    run.batch(placed())
    (enriched,) = run.of(Topic.ORDERS_ENRICHED)
    assert enriched["version"] == 4 and enriched["status"] == "OUT_FOR_DELIVERY"
    assert enriched["event_time"] == T0 + 5000 and enriched["location_time"] == T0 + 5000
    (delivery,) = run.of(Topic.DELIVERY_STATUSES)
    assert delivery["version"] == 4
    assert run.states[1]["buffered"] == []


def test_point_before_out_for_delivery_status_is_mapped_once_status_arrives():
    run = Run()
    run.batch(placed())
    run.batch(point(T0 + 2000, 0.1))  # GPS topic was faster than the status topic
    assert run.of(Topic.DELIVERY_STATUSES) == []
    run.batch(status(OrderStatus.OUT_FOR_DELIVERY, T0 + 1000, courier=5))
    (delivery,) = run.of(Topic.DELIVERY_STATUSES)
    assert delivery["event_time"] == T0 + 2000 and delivery["version"] == 3


def test_buffer_expires_to_dead_letters():
    run = Run(buffer_ttl_ms=1000)
    now = now_ms()
    run.batch(status(OrderStatus.ORDER_CONFIRMED, T0 + 1000, order_id=9), now=now)
    run.batch(point(T0 + 2000, 0.1, order_id=9), now=now + 500)
    assert 9 in run.states
    run.batch(now=now + 1000)  # TTL passed, no new events for that order
    assert 9 not in run.states
    dead = run.of(Topic.DEAD_LETTERS)
    assert len(dead) == 2 and all("never arrived" in d["reason"] for d in dead)
    assert {d["source_topic"] for d in dead} == {"order_statuses", "delivery_locations"}
    value = json.loads(base64.b64decode(dead[0]["value_b64"]))
    assert value["order_id"] == 9


def test_finished_orders_are_evicted_after_done_ttl():
    run = Run(done_ttl_ms=1000)
    now = now_ms()
    run.batch(*full_lifecycle(), now=now)
    assert run.states[1]["done_since"] == now
    run.batch(status(OrderStatus.DELIVERED, T0 + 60_000), now=now + 500)  # dup: no-op
    assert 1 in run.states
    run.batch(now=now + 1000)
    assert 1 not in run.states


def test_cancellation_rules():
    run = Run()
    run.batch(placed(), status(OrderStatus.ORDER_CONFIRMED, T0 + 1000))
    run.batch(status(OrderStatus.CANCELLED, T0 + 2000))
    assert run.of(Topic.ORDERS_ENRICHED)[-1]["status"] == "CANCELLED"
    assert run.of(Topic.ORDERS_ENRICHED)[-1]["cancelled_at"] == T0 + 2000
    run.batch(status(OrderStatus.BEING_COOKED, T0 + 3000))  # after the cancel: refused
    (dead,) = run.of(Topic.DEAD_LETTERS)
    assert "cancelled" in dead["reason"]
    other = Run()
    other.batch(placed(2), status(OrderStatus.OUT_FOR_DELIVERY, T0 + 1000, order_id=2))
    other.batch(status(OrderStatus.CANCELLED, T0 + 2000, order_id=2))
    assert other.of(Topic.ORDERS_ENRICHED)[-1]["status"] == "OUT_FOR_DELIVERY"
    (dead,) = other.of(Topic.DEAD_LETTERS)
    assert "cannot cancel" in dead["reason"]


@pytest.mark.parametrize(
    ("topic", "value", "reason"),
    [
        (Topic.ORDERS, b"not json", "invalid value: not valid JSON"),
        (Topic.ORDER_STATUSES, None, "invalid value: message has no value"),
        (Topic.ORDER_STATUSES, b"[1]", "invalid value: must be a JSON object"),
        (
            Topic.ORDER_STATUSES,
            json.dumps(
                {
                    "schema_version": 1,
                    "event_id": str(uuid.uuid4()),
                    "event_time": T0,
                    "order_id": 1,
                    "status": "TELEPORTED",
                }
            ).encode(),
            "invalid status: unknown status",
        ),
        (
            Topic.DELIVERY_LOCATIONS,
            json.dumps(
                {
                    "schema_version": 1,
                    "event_id": str(uuid.uuid4()),
                    "event_time": T0,
                    "order_id": 1,
                    "courier_id": 5,
                    "lat": 123.0,
                    "lon": 0.0,
                }
            ).encode(),
            "invalid lat: latitude out of range",
        ),
    ],
)
def test_malformed_events_go_to_dead_letters_with_reason(topic, value, reason):
    run = Run()
    run.batch(placed())
    bad = raw(topic, value)
    out = run.batch(records=[bad])
    (dead,) = [o.decoded() for o in out]
    assert dead["reason"].startswith(reason)
    assert dead["source_topic"] == topic.value and dead["source_offset"] == bad.offset
    assert base64.b64decode(dead["value_b64"]) == (value or b"")
    assert run.states[1]["version"] == 1  # the order is untouched


def test_outputs_are_deterministic_for_idempotent_replays():
    a, b = Run(), Run()
    a.batch(*full_lifecycle())
    b.batch(*full_lifecycle())  # same content, new event ids
    ids = [o.decoded()["event_id"] for o in a.outputs]
    assert ids == [o.decoded()["event_id"] for o in b.outputs]
    keys = [(e["order_id"], e["version"]) for e in a.of(Topic.ORDERS_ENRICHED)]
    assert len(keys) == len(set(keys))


def test_apply_events_does_not_mutate_input_state():
    st = join.apply_events(None, [join.parse_record(record(placed()))], now_ms()).state
    frozen = json.dumps(st)
    join.apply_events(
        st, [join.parse_record(record(status(OrderStatus.ORDER_CONFIRMED, T0 + 1)))], now_ms()
    )
    assert json.dumps(st) == frozen

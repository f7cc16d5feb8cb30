"""The join's rules, run by Spark in batch mode over small DataFrames (no broker, no stream).

``streaming.enrich.outputs`` is the same plan the streaming job runs; on a static
DataFrame its aggregation sees every event at once, so each test states what the
final records are for a set of events, whatever order they come in.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import uuid

import pytest

from contract import geo
from contract.events import (
    EVENT_TYPES,
    LIFECYCLE,
    DeadLetter,
    DeliveryLocation,
    EventValidationError,
    OrderEnriched,
    OrderPlaced,
    OrderStatus,
    OrderStatusChanged,
    Topic,
    now_ms,
    parse_event,
    status_time_field,
)
from streaming import enrich, records

T0 = now_ms() - 3_600_000
SHOP = (12.9716, 77.5946)
HOME = (12.9352, 77.6245)
_offsets = itertools.count()


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
        placed_at=T0,
        status=s.value,
        courier_id=courier,
    )


def point(t: int, fraction: float, order_id: int = 1, courier: int = 5) -> DeliveryLocation:
    lat, lon = geo.interpolate(*SHOP, *HOME, fraction)
    return DeliveryLocation(
        event_id=str(uuid.uuid4()),
        event_time=t,
        order_id=order_id,
        placed_at=T0,
        courier_id=courier,
        lat=lat,
        lon=lon,
    )


def full_lifecycle(order_id: int = 1) -> list:
    evs: list = [placed(order_id)]
    for i, s in enumerate(LIFECYCLE[1:], start=1):
        evs.append(status(s, T0 + i * 10_000, order_id, courier=5 if i >= 4 else None))
        if s is OrderStatus.OUT_FOR_DELIVERY:
            evs += [point(T0 + i * 10_000 + k * 1000, k / 4, order_id) for k in range(1, 4)]
    return evs


SOURCE_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
)


def source_rows(events=(), raw: list[tuple[Topic, bytes | None, bytes | None]] = ()) -> list:
    """Kafka source rows for events (keyed as producers key them) and raw messages."""
    rows = [(e.key(), e.to_json(), e.TOPIC.value, 0, next(_offsets), None) for e in events]
    rows += [(k, v, t.value, 1, next(_offsets), None) for t, k, v in raw]
    return rows


def run_batch(spark, events=(), raw=()) -> dict[Topic, list[dict]]:
    """The job's outputs for these messages, decoded, by logical topic."""
    df = spark.createDataFrame(source_rows(events, raw), SOURCE_SCHEMA)
    out: dict[Topic, list[dict]] = {t: [] for t in Topic}
    for row in enrich.outputs(df).collect():
        record = json.loads(row.value)
        if (event := EVENT_TYPES.get(Topic(row.topic))) is not None:
            # Exactly the contract's fields: nothing retired (eta_seconds) is still written.
            fields = {"schema_version", *(f.name for f in dataclasses.fields(event))}
            assert set(record) == fields, set(record) ^ fields
        out[Topic(row.topic)].append(record)
    return out


def only(rows: list[dict]) -> dict:
    (row,) = rows
    return row


pytestmark = pytest.mark.spark


def test_order_placed_emits_enriched_record_and_item_rows(spark):
    out = run_batch(spark, [placed()])
    enriched = only(out[Topic.ORDERS_ENRICHED])
    assert OrderEnriched.from_dict({k: v for k, v in enriched.items() if k != "schema_version"})
    assert enriched["status"] == "PLACED_ORDER" and enriched["version"] == 1
    assert enriched["placed_order_at"] == T0 == enriched["created_at"] == enriched["status_time"]
    assert enriched["item_count"] == 3 and enriched["total"] == 21.0
    lines = sorted(out[Topic.ORDER_ITEMS_ENRICHED], key=lambda r: r["line"])
    assert [(r["line"], r["product_name"], r["line_total"]) for r in lines] == [
        (1, "Margherita", 19.0),
        (2, "Cola", 2.0),
    ]
    assert out[Topic.DELIVERY_STATUSES] == [] and out[Topic.DEAD_LETTERS] == []


def test_full_lifecycle_records_every_status_time_and_ends_delivered(spark):
    evs = full_lifecycle()
    enriched = only(run_batch(spark, evs)[Topic.ORDERS_ENRICHED])
    assert enriched["status"] == "DELIVERED" and enriched["version"] == len(evs)
    for i, s in enumerate(LIFECYCLE[1:], start=1):
        assert enriched[status_time_field(s)] == T0 + i * 10_000
    assert enriched["cancelled_at"] is None
    assert enriched["distance_left_km"] == 0.0
    assert enriched["courier_id"] == 5
    assert enriched["event_time"] == max(e.event_time for e in evs)


def test_courier_point_on_the_road_gives_distance_left_and_delivery_status(spark):
    evs = [placed(), status(OrderStatus.OUT_FOR_DELIVERY, T0 + 100, courier=5)]
    evs += [point(T0 + 200, 0.25), point(T0 + 300, 0.5)]
    out = run_batch(spark, evs)
    enriched = only(out[Topic.ORDERS_ENRICHED])
    lat, lon = geo.interpolate(*SHOP, *HOME, 0.5)
    km = round(geo.haversine_km(lat, lon, *HOME), 4)
    assert enriched["location_time"] == T0 + 300
    assert enriched["distance_left_km"] == pytest.approx(km, abs=1e-4)
    delivery = only(out[Topic.DELIVERY_STATUSES])
    assert delivery["distance_left_km"] == enriched["distance_left_km"]
    assert (delivery["lat"], delivery["lon"]) == pytest.approx((lat, lon))
    assert delivery["version"] == enriched["version"] and delivery["status"] == "OUT_FOR_DELIVERY"


def test_out_of_order_statuses_never_move_an_order_backwards(spark):
    evs = [
        placed(),
        status(OrderStatus.BEING_COOKED, T0 + 30),
        status(OrderStatus.ORDER_CONFIRMED, T0 + 10),  # late: fills in its time only
    ]
    enriched = only(run_batch(spark, list(reversed(evs)))[Topic.ORDERS_ENRICHED])
    assert enriched["status"] == "BEING_COOKED" and enriched["status_time"] == T0 + 30
    assert enriched["order_confirmed_at"] == T0 + 10


def test_latest_point_wins_whatever_the_arrival_order(spark):
    evs = [placed(), status(OrderStatus.OUT_FOR_DELIVERY, T0 + 100, courier=5)]
    late, latest = point(T0 + 200, 0.2), point(T0 + 400, 0.6)
    for order in ([*evs, late, latest], [latest, *evs, late]):
        enriched = only(run_batch(spark, order)[Topic.ORDERS_ENRICHED])
        assert enriched["location_time"] == T0 + 400


def test_duplicates_change_no_content(spark):
    evs = full_lifecycle()
    once = only(run_batch(spark, evs)[Topic.ORDERS_ENRICHED])
    twice = only(run_batch(spark, evs + evs)[Topic.ORDERS_ENRICHED])
    ignore = {"event_id", "version"}
    assert {k: v for k, v in once.items() if k not in ignore} == {
        k: v for k, v in twice.items() if k not in ignore
    }
    assert twice["version"] > once["version"]


def test_events_before_their_order_wait_for_it(spark):
    evs = [status(OrderStatus.ORDER_CONFIRMED, T0 + 10), point(T0 + 20, 0.1)]
    out = run_batch(spark, evs)
    assert out[Topic.ORDERS_ENRICHED] == [] and out[Topic.DEAD_LETTERS] == []
    enriched = only(run_batch(spark, [*evs, placed()])[Topic.ORDERS_ENRICHED])
    assert enriched["status"] == "ORDER_CONFIRMED" and enriched["version"] == 3


def test_point_before_out_for_delivery_is_mapped_once_the_status_arrives(spark):
    evs = [placed(), point(T0 + 200, 0.3)]
    assert run_batch(spark, evs)[Topic.DELIVERY_STATUSES] == []
    evs.append(status(OrderStatus.OUT_FOR_DELIVERY, T0 + 100, courier=5))
    delivery = only(run_batch(spark, evs)[Topic.DELIVERY_STATUSES])
    assert delivery["event_time"] == T0 + 200


def test_cancel_counts_only_before_the_food_leaves(spark):
    cancelled = [
        placed(),
        status(OrderStatus.ORDER_CONFIRMED, T0 + 10),
        status(OrderStatus.CANCELLED, T0 + 20),
        status(OrderStatus.BEING_PREPARED, T0 + 30),  # after the cancel: ignored
    ]
    enriched = only(run_batch(spark, cancelled)[Topic.ORDERS_ENRICHED])
    assert enriched["status"] == "CANCELLED" and enriched["cancelled_at"] == T0 + 20
    assert enriched["being_prepared_at"] is None

    too_late = [
        placed(),
        status(OrderStatus.OUT_FOR_DELIVERY, T0 + 10, courier=5),
        status(OrderStatus.CANCELLED, T0 + 20),  # the food had left: ignored
    ]
    enriched = only(run_batch(spark, list(reversed(too_late)))[Topic.ORDERS_ENRICHED])
    assert enriched["status"] == "OUT_FOR_DELIVERY" and enriched["cancelled_at"] is None


def test_output_ids_are_the_contract_uuid5_and_replays_are_byte_identical(spark):
    evs = full_lifecycle()
    first = run_batch(spark, evs)
    enriched = only(first[Topic.ORDERS_ENRICHED])
    assert enriched["event_id"] == records.output_id(Topic.ORDERS_ENRICHED, 1, enriched["version"])
    line = min(first[Topic.ORDER_ITEMS_ENRICHED], key=lambda r: r["line"])
    assert line["event_id"] == records.output_id(Topic.ORDER_ITEMS_ENRICHED, 1, 1)
    again = run_batch(spark, evs)
    for topic in (Topic.ORDERS_ENRICHED, Topic.ORDER_ITEMS_ENRICHED, Topic.DELIVERY_STATUSES):
        assert sorted(map(json.dumps, again[topic])) == sorted(map(json.dumps, first[topic]))


def _valid(topic: Topic) -> dict:
    event = {
        Topic.ORDERS: placed(),
        Topic.ORDER_STATUSES: status(OrderStatus.ORDER_CONFIRMED, T0 + 1),
        Topic.DELIVERY_LOCATIONS: point(T0 + 2, 0.5),
    }[topic]
    return json.loads(event.to_json())


def _mutations() -> list[tuple[Topic, str, bytes | None]]:
    """Broken messages of every kind: (topic, what is broken, value)."""
    cases: list[tuple[Topic, str, bytes | None]] = [
        (Topic.ORDERS, "no value", None),
        (Topic.ORDERS, "not JSON", b"{not json"),
        (Topic.ORDER_STATUSES, "a JSON array", b"[1, 2]"),
    ]

    def mutate(topic: Topic, label: str, change) -> None:
        body = _valid(topic)
        change(body)
        cases.append((topic, label, json.dumps(body).encode()))

    for topic in (Topic.ORDERS, Topic.ORDER_STATUSES, Topic.DELIVERY_LOCATIONS):
        mutate(topic, "no schema_version", lambda b: b.pop("schema_version"))
        mutate(topic, "schema_version 2", lambda b: b.update(schema_version=2))
        mutate(topic, "unknown field", lambda b: b.update(zz_extra=1))
        mutate(topic, "missing event_id", lambda b: b.pop("event_id"))
        mutate(topic, "event_id not a UUID", lambda b: b.update(event_id="nope"))
        mutate(topic, "event_time a string", lambda b: b.update(event_time="soon"))
        mutate(topic, "event_time a float", lambda b: b.update(event_time=1.5))
        mutate(topic, "event_time in the future", lambda b: b.update(event_time=now_ms() + 10**9))
        mutate(topic, "negative order_id", lambda b: b.update(order_id=-1))
        mutate(topic, "order_id null", lambda b: b.update(order_id=None))
    mutate(Topic.ORDERS, "latitude 95", lambda b: b.update(delivery_lat=95))
    mutate(Topic.ORDERS, "longitude a string", lambda b: b.update(restaurant_lon="east"))
    mutate(Topic.ORDERS, "no items", lambda b: b.update(items=[]))
    mutate(Topic.ORDERS, "items an object", lambda b: b.update(items={}))
    mutate(Topic.ORDERS, "total negative", lambda b: b.update(total="-1"))
    mutate(Topic.ORDERS, "total a number", lambda b: b.update(total=21))
    mutate(Topic.ORDERS, "second item quantity 0", lambda b: b["items"][1].update(quantity=0))
    mutate(Topic.ORDERS, "item not an object", lambda b: b["items"].append(3))
    mutate(Topic.ORDERS, "item price not money", lambda b: b["items"][0].update(unit_price="x"))
    mutate(Topic.ORDERS, "item name missing", lambda b: b["items"][0].pop("name"))
    mutate(Topic.ORDER_STATUSES, "unknown status", lambda b: b.update(status="LOST"))
    mutate(Topic.ORDER_STATUSES, "placed_at missing", lambda b: b.pop("placed_at"))
    mutate(Topic.ORDER_STATUSES, "courier_id a string", lambda b: b.update(courier_id="5"))
    mutate(Topic.DELIVERY_LOCATIONS, "longitude 200", lambda b: b.update(lon=200))
    mutate(Topic.DELIVERY_LOCATIONS, "lat a bool", lambda b: b.update(lat=True))
    # Bounds of the rule table: what no store downstream can hold, or the watermark must not see.
    month = 30 * 24 * 3_600_000
    for topic in (Topic.ORDER_STATUSES, Topic.DELIVERY_LOCATIONS):
        mutate(topic, "placed_at a month ahead", lambda b: b.update(placed_at=now_ms() + month))
        mutate(
            topic, "placed_at after event_time", lambda b: b.update(placed_at=b["event_time"] + 1)
        )
    mutate(
        Topic.ORDERS,
        "quantity over Pinot's INT",
        lambda b: b["items"][0].update(quantity=3 * 10**9),
    )
    mutate(Topic.ORDERS, "total over numeric(12, 2)", lambda b: b.update(total="1e12"))
    mutate(Topic.ORDERS, "unit_price NaN", lambda b: b["items"][1].update(unit_price="NaN"))
    mutate(Topic.ORDERS, "restaurant_name too long", lambda b: b.update(restaurant_name="x" * 121))
    mutate(Topic.ORDERS, "too many lines", lambda b: b.update(items=b["items"] * 501))
    mutate(Topic.ORDER_STATUSES, "courier_id 0", lambda b: b.update(courier_id=0))
    mutate(Topic.ORDER_STATUSES, "previous_status unknown", lambda b: b.update(previous_status="X"))
    return cases


def test_every_malformed_event_is_a_dead_letter_naming_the_field_parse_event_names(spark):
    cases = _mutations()
    raw = [(topic, b"1", value) for topic, _, value in cases]
    out = run_batch(spark, raw=raw)
    by_offset = {d["source_offset"]: d for d in out[Topic.DEAD_LETTERS]}
    assert len(by_offset) == len(cases), "every broken message is dead-lettered, once"
    assert out[Topic.ORDERS_ENRICHED] == [] and out[Topic.ORDER_ITEMS_ENRICHED] == []
    for (topic, label, value), dead in zip(
        cases, sorted(by_offset.values(), key=lambda d: d["source_offset"]), strict=True
    ):
        with pytest.raises(EventValidationError) as exc:
            parse_event(topic, value)
        assert dead["reason"].startswith(f"invalid {exc.value.field}:"), (label, dead["reason"])
        letter = DeadLetter.from_dict({k: v for k, v in dead.items() if k != "schema_version"})
        assert letter.original_value() == (value or b"") and letter.source_topic == topic.value


def test_key_that_is_not_the_order_id_is_a_dead_letter(spark):
    event = placed(order_id=5)
    out = run_batch(spark, raw=[(Topic.ORDERS, b"6", event.to_json())])
    assert only(out[Topic.DEAD_LETTERS])["reason"] == "message key is not the order_id"
    assert out[Topic.ORDERS_ENRICHED] == []


def test_dead_letter_ids_are_stable_for_the_same_message(spark):
    raw = [(Topic.ORDERS, b"1", b"{broken" * 40)]  # long enough for MIME line wrapping
    df = spark.createDataFrame(source_rows(raw=raw), SOURCE_SCHEMA)
    first = json.loads(enrich.outputs(df).collect()[0].value)
    again = json.loads(enrich.outputs(df).collect()[0].value)
    assert first["event_id"] == again["event_id"]
    assert base64.b64decode(first["value_b64"], validate=True) == b"{broken" * 40

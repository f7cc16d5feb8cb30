"""The event contract refuses bad events with the field named, and round-trips good ones."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from contract import events
from contract.events import EventValidationError, OrderStatus, Topic, parse_event
from contract.rules import rules_of


def _event(**fields) -> dict:
    """A valid event body: the fields every event carries (order 7, now), then ``fields``."""
    header = {"schema_version": events.SCHEMA_VERSION, "event_id": str(uuid.uuid4()),
              "event_time": events.now_ms(), "order_id": 7}  # fmt: skip
    return {**header, **fields}


def _status_event(**overrides) -> dict:
    body = _event(
        placed_at=events.now_ms() - 60_000, status="ORDER_CONFIRMED",
        previous_status="PLACED_ORDER", courier_id=None,
    )  # fmt: skip
    return {**body, **overrides}


def _location(**overrides) -> bytes:
    body = _event(placed_at=events.now_ms() - 60_000, courier_id=3, lat=12.97, lon=77.59)
    return json.dumps({**body, **overrides}).encode()


def test_valid_status_event_round_trips():
    event = parse_event(Topic.ORDER_STATUSES, json.dumps(_status_event()).encode())
    assert isinstance(event, events.OrderStatusChanged)
    assert parse_event(Topic.ORDER_STATUSES, event.to_json()) == event
    assert event.key() == b"7"


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        (b"{not json", "value", "not valid JSON"),
        (b"[1, 2]", "value", "JSON object"),
        (json.dumps(_status_event(status="TELEPORTED")).encode(), "status", "unknown status"),
        (
            json.dumps({k: v for k, v in _status_event().items() if k != "order_id"}).encode(),
            "order_id",
            "required",
        ),
        (json.dumps(_status_event(order_id="7")).encode(), "order_id", "integer"),
        (json.dumps(_status_event(event_id="nope")).encode(), "event_id", "UUID"),
        (
            json.dumps(_status_event(event_time=events.now_ms() + 3600_000)).encode(),
            "event_time",
            "future",
        ),
        (json.dumps(_status_event(schema_version=99)).encode(), "schema_version", "unsupported"),
        (json.dumps(_status_event(colour="red")).encode(), "colour", "not a field"),
    ],
)
def test_malformed_status_events_name_the_bad_field(raw, field, reason):
    with pytest.raises(EventValidationError) as caught:
        parse_event(Topic.ORDER_STATUSES, raw)
    assert caught.value.field == field
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"lat": 91.0}, "lat"),
        ({"lon": -181.5}, "lon"),
        ({"lat": float("nan")}, "lat"),
        ({"lat": True}, "lat"),
    ],
)
def test_impossible_coordinates_are_refused(overrides, field):
    raw = _location(**overrides)
    with pytest.raises(EventValidationError) as caught:
        parse_event(Topic.DELIVERY_LOCATIONS, raw)
    assert caught.value.field == field


def test_nested_item_errors_name_the_path():
    body = _event(order_id=1) | {
        "customer_id": 1,
        "customer_name": "A",
        "restaurant_id": 1,
        "restaurant_name": "R",
        "restaurant_lat": 12.9,
        "restaurant_lon": 77.6,
        "delivery_lat": 12.9,
        "delivery_lon": 77.6,
        "items": [
            {
                "product_id": 1,
                "name": "Pizza",
                "category": "Pizza",
                "quantity": 0,
                "unit_price": "8.50",
            }
        ],
        "total": "8.50",
    }
    with pytest.raises(EventValidationError) as caught:
        parse_event(Topic.ORDERS, json.dumps(body).encode())
    assert caught.value.field == "items[0].quantity"


def test_lifecycle_allows_only_the_next_step_or_an_early_cancel():
    statuses = list(OrderStatus)
    allowed = {(a, b) for a in statuses for b in statuses if events.can_transition(a, b)}
    expected = {(a, b) for a, b in zip(events.LIFECYCLE, events.LIFECYCLE[1:], strict=False)} | {
        (s, OrderStatus.CANCELLED)
        for s in events.LIFECYCLE[: events.LIFECYCLE.index(OrderStatus.OUT_FOR_DELIVERY)]
    }
    assert allowed == expected
    assert events.next_status(OrderStatus.DELIVERED) is None
    assert events.next_status(OrderStatus.CANCELLED) is None


def test_every_topic_has_one_event_type_and_enriched_times_cover_every_status():
    assert set(events.EVENT_TYPES) == set(Topic) - {Topic.DEAD_LETTERS}
    enriched = {f for f in events.OrderEnriched.__dataclass_fields__}
    assert set(events.STATUS_TIME_FIELDS) <= enriched


def test_dead_letter_keeps_the_original_bytes():
    letter = events.DeadLetter.for_message(
        topic="orders",
        partition=2,
        offset=9,
        key=b"7",
        value=b"\xff\x00junk",
        reason="value: not valid JSON",
    )
    decoded = events.DeadLetter.from_dict(
        {k: v for k, v in json.loads(letter.to_json()).items() if k != "schema_version"}
    )
    assert decoded.original_value() == b"\xff\x00junk"
    assert decoded.key() == b"7"


def test_the_retired_eta_seconds_is_read_and_dropped_never_written():
    """The stream job's fixed-speed ETA left the contract (the learned prediction is the one
    ETA): records an earlier job wrote, still on the topics after an upgrade, stay readable;
    no event writes it, and a topic that never had it still refuses it."""
    position = _event(
        version=3, customer_id=1, restaurant_id=2, courier_id=3, status="OUT_FOR_DELIVERY",
        lat=12.97, lon=77.59, destination_lat=12.98, destination_lon=77.6, distance_left_km=1.5,
    )  # fmt: skip
    written = parse_event(Topic.DELIVERY_STATUSES, json.dumps({**position, "eta_seconds": 270}))
    assert written == parse_event(Topic.DELIVERY_STATUSES, json.dumps(position))
    assert "eta_seconds" not in json.loads(written.to_json())
    for event in (events.OrderEnriched, events.DeliveryStatus):
        assert "eta_seconds" in event.RETIRED
        assert "eta_seconds" not in {f.name for f in dataclasses.fields(event)}
        assert "eta_seconds" not in rules_of(event)
    with pytest.raises(EventValidationError) as caught:
        parse_event(Topic.ORDER_STATUSES, json.dumps(_status_event(eta_seconds=270)).encode())
    assert (caught.value.field, caught.value.reason) == (
        "eta_seconds",
        "is not a field of this event",
    )

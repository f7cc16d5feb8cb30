"""Hypothesis over the event validators: any bytes either parse into a valid event
or raise EventValidationError naming a field; never another exception."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import events
from contract.events import EventValidationError, Topic, parse_event
from tests.fixtures_pinot import delivery_event, item_event, order_event

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(topic: Topic, raw: bytes) -> None:
    try:
        event = parse_event(topic, raw)
    except EventValidationError as exc:
        assert exc.field and exc.reason
        return
    # Whatever parsed is a valid event that survives a round trip unchanged.
    assert parse_event(topic, event.to_json()) == event


@FUZZ
@given(topic=st.sampled_from(list(events.EVENT_TYPES)), raw=st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_validator(topic, raw):
    _outcome(topic, raw)


@FUZZ
@given(topic=st.sampled_from(list(events.EVENT_TYPES)), value=JSON)
def test_arbitrary_json_never_crashes_the_validator(topic, value):
    _outcome(topic, json.dumps(value).encode())


def _valid_location() -> dict:
    return {
        "schema_version": 1, "event_id": str(uuid.uuid4()), "event_time": events.now_ms(),
        "order_id": 1, "placed_at": events.now_ms() - 60_000, "courier_id": 2, "lat": 12.9,
        "lon": 77.6,
    }  # fmt: skip


@FUZZ
@given(field=st.sampled_from(sorted(_valid_location())), value=JSON)
def test_one_mutated_field_is_named_when_refused(field, value):
    body = _valid_location()
    body[field] = value
    try:
        parse_event(Topic.DELIVERY_LOCATIONS, json.dumps(body).encode())
    except EventValidationError as exc:
        # A rule between two fields (placed_at not after event_time) names the field it is
        # stated on, and its reason names the other one.
        assert exc.field == field or field in str(exc), (field, str(exc))


# Extremes (issue 15): huge numbers, deep nesting, long strings, in every field of every event.
HUGE = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64, 1e308, -1e308, 5e-324]),
)
LONG = st.builds(lambda ch, n: ch * n, st.sampled_from(["a", "é", "\x00", "💥"]),
                 st.integers(min_value=1000, max_value=100_000))  # fmt: skip
EXTREME = st.one_of(
    HUGE, LONG, st.integers(min_value=30, max_value=3000).map(lambda d: f"__DEEP_{d}__")
)
_DEEP = re.compile(r'"__DEEP_(\d+)__"')


def _placed() -> events.Event:
    return events.OrderPlaced.from_dict({
        "event_id": str(uuid.uuid4()), "event_time": events.now_ms(), "order_id": 1,
        "customer_id": 2, "customer_name": "A", "restaurant_id": 3, "restaurant_name": "R",
        "restaurant_lat": 12.97, "restaurant_lon": 77.64, "delivery_lat": 12.95,
        "delivery_lon": 77.6, "total": "8.50",
        "items": [{"product_id": 1, "name": "P", "category": "Pizza", "quantity": 1,
                   "unit_price": "8.50"}],
    })  # fmt: skip


SAMPLES = {
    Topic.ORDERS: _placed,
    Topic.ORDER_STATUSES: lambda: events.OrderStatusChanged.from_dict(
        {
            "event_id": str(uuid.uuid4()),
            "event_time": events.now_ms(),
            "order_id": 1,
            "status": "ORDER_CONFIRMED",
            "previous_status": "PLACED_ORDER",
            "courier_id": None,
            "placed_at": events.now_ms() - 60_000,
        }
    ),  # fmt: skip
    Topic.DELIVERY_LOCATIONS: lambda: events.DeliveryLocation.from_dict(
        {k: v for k, v in _valid_location().items() if k != "schema_version"}
    ),
    Topic.ORDERS_ENRICHED: lambda: order_event(1, 1),
    Topic.DELIVERY_STATUSES: lambda: delivery_event(1, 1, 12.9, 77.6),
    Topic.ORDER_ITEMS_ENRICHED: lambda: item_event(1, 0, "Margherita", 1, 8.5),
}


def _valid_body(topic: Topic) -> dict:
    """A valid event of ``topic`` as a dict (built from the contract's own fixtures)."""
    return json.loads(SAMPLES[topic]().to_json())


def _encode(body: dict) -> bytes:
    text = json.dumps(body)
    return _DEEP.sub(lambda m: "[" * int(m[1]) + "]" * int(m[1]), text).encode()


@FUZZ
@given(topic=st.sampled_from(list(events.EVENT_TYPES)), data=st.data())
def test_extreme_values_in_any_field_are_refused_by_name_or_accepted(topic, data):
    body = _valid_body(topic)
    fields = data.draw(st.lists(st.sampled_from(sorted(body)), min_size=1, max_size=3, unique=True))
    for name in fields:
        body[name] = data.draw(EXTREME)
    try:
        event = parse_event(topic, _encode(body))
    except EventValidationError as exc:
        assert exc.field and exc.reason
        return
    assert parse_event(topic, event.to_json()) == event


@pytest.mark.parametrize("topic", list(events.EVENT_TYPES))
def test_numbers_past_the_digit_limit_and_100k_deep_nesting_are_validation_errors(topic):
    body = _valid_body(topic)
    over = json.dumps({**body, "order_id": "__RAW__"}).replace('"__RAW__"', "9" * 5000)
    for raw in (
        over.encode(),
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
    ):
        with pytest.raises(EventValidationError) as refused:
            parse_event(topic, raw)
        assert refused.value.field == "value"


@FUZZ
@given(topic=st.sampled_from(list(events.EVENT_TYPES)), data=st.data())
def test_refusal_reasons_stay_short_whatever_the_input(topic, data):
    """A reason lands in dead_letters and logs: a 100k-character field must not be copied."""
    body = _valid_body(topic)
    body[data.draw(st.sampled_from(sorted(body)))] = data.draw(st.one_of(LONG, HUGE))
    try:
        parse_event(topic, _encode(body))
    except EventValidationError as exc:
        assert len(exc.reason) < 300, exc.reason[:300]

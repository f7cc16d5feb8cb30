"""Hypothesis over the event validators: any bytes either parse into a valid event
or raise EventValidationError naming a field; never another exception."""

from __future__ import annotations

import json
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracker.core import events
from tracker.core.events import EventValidationError, Topic, parse_event

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
        assert exc.field == field

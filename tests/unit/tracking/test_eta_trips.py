"""A ride's prediction from a courier's point (``delivery_statuses``, what the notifier
reads) is the one the pages make from the order's enriched record: the notifier tells
"running late" by the same arrival the customer sees."""

from __future__ import annotations

import dataclasses

import pytest

from contract.events import now_ms
from tests.fixtures_pinot import delivery_event, order_event
from tracker.tracking import eta
from tracker.tracking.eta.stats import Statistics


@pytest.mark.parametrize("km_left", [0.4, 3.0, 40.0])
def test_a_point_on_the_road_predicts_the_arrival_its_enriched_record_does(km_left):
    at = now_ms()
    point = (52.525, 13.41)
    record = order_event(
        42, 9, "OUT_FOR_DELIVERY", status_time=at - 600_000,
        courier=(7, *point, at), distance_left_km=km_left,
    )  # fmt: skip
    delivery = dataclasses.replace(
        delivery_event(42, 9, *point, at=at), distance_left_km=km_left,
        destination_lat=record.delivery_lat, destination_lon=record.delivery_lon,
    )  # fmt: skip
    stats = Statistics(as_of=at)
    from_point = eta.predict(eta.Trip.of_delivery(delivery), stats, at)
    assert from_point is not None
    assert from_point == eta.predict(eta.Trip.of_enriched(record), stats, at)

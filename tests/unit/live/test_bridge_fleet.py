"""The operators' fleet (tracker/live/fleet.py) on its own: each courier at most once a
second with its newest point and how late its delivery runs, and a courier whose ride
ended leaves the map. The arrival statistics are the predictor's defaults (no Pinot)."""

from __future__ import annotations

import pytest

from contract.events import DeliveryLocation, new_event_id, now_ms
from tests.fixtures_pinot import order_event
from tracker.live.fleet import FLEET_INTERVAL_SECONDS, Fleet
from tracker.tracking import eta

NOW = now_ms()


@pytest.fixture(autouse=True)
def _default_statistics(monkeypatch):
    monkeypatch.setattr(eta, "current_statistics", lambda: eta.Statistics())


def _point(order_id, at, courier_id=7, lat=52.521):
    return DeliveryLocation(
        event_id=new_event_id(), event_time=at, order_id=order_id, placed_at=at - 600_000,
        courier_id=courier_id, lat=lat, lon=13.401,
    )  # fmt: skip


def _on_road(order_id, courier_id=7, status="OUT_FOR_DELIVERY"):
    picked_up = NOW - 120_000
    return order_event(
        order_id, 3, status, status_time=picked_up, courier=(courier_id, 52.52, 13.40, picked_up),
        status_times={"OUT_FOR_DELIVERY": picked_up},
    )  # fmt: skip


def test_a_courier_is_sent_at_most_once_an_interval_with_its_newest_point():
    fleet = Fleet()
    fleet.follow(_on_road(5))
    fleet.moved([_point(5, NOW - 1000)])
    first = fleet.message(100.0)
    assert first is not None and first["type"] == "fleet" and first["gone"] == []
    [courier] = first["couriers"]
    assert (courier["courier_id"], courier["order_id"], courier["lat"]) == (7, 5, 52.521)
    assert isinstance(courier["late_seconds"], int)  # its arrival was predicted at pickup

    fleet.moved([_point(5, NOW, lat=52.522)])
    fleet.moved([_point(5, NOW + 500, lat=52.523)])
    assert fleet.message(100.0 + FLEET_INTERVAL_SECONDS / 2) is None  # its second is not up
    later = fleet.message(100.0 + FLEET_INTERVAL_SECONDS)
    assert later is not None and [c["lat"] for c in later["couriers"]] == [52.523]
    assert fleet.message(200.0) is None  # nothing new


def test_a_courier_whose_ride_is_unknown_has_no_lateness():
    fleet = Fleet()
    fleet.moved([_point(9, NOW, courier_id=3)])
    message = fleet.message(0.0)
    assert message is not None
    assert [(c["courier_id"], c["late_seconds"]) for c in message["couriers"]] == [(3, None)]


def test_a_delivered_ride_takes_its_courier_off_the_map_and_drops_its_waiting_point():
    fleet = Fleet()
    fleet.follow(_on_road(5))
    fleet.moved([_point(5, NOW)])
    assert fleet.message(100.0) is not None
    fleet.moved([_point(5, NOW + 1000)])  # waits for its second
    fleet.follow(_on_road(5, status="DELIVERED"))
    assert fleet.message(200.0) == {"type": "fleet", "couriers": [], "gone": [7]}
    assert fleet.message(300.0) is None


def test_a_ride_that_ends_after_its_courier_moved_on_leaves_that_courier_alone():
    fleet = Fleet()
    fleet.moved([_point(5, NOW), _point(6, NOW + 1, courier_id=7)])  # now carrying order 6
    fleet.follow(_on_road(5, status="CANCELLED"))
    message = fleet.message(0.0)
    assert message is not None and message["gone"] == []
    assert [(c["courier_id"], c["order_id"]) for c in message["couriers"]] == [(7, 6)]


def test_nobody_watching_drops_what_waits_and_the_next_point_brings_the_courier_back():
    fleet = Fleet()
    fleet.follow(_on_road(5))
    fleet.moved([_point(5, NOW)])
    fleet.follow(_on_road(6, courier_id=8, status="DELIVERED"))
    fleet.moved([_point(6, NOW, courier_id=8)])
    fleet.forget_pending()
    assert fleet.message(100.0) is None
    fleet.moved([_point(5, NOW + 1000)])
    message = fleet.message(101.0)
    assert message is not None and [c["courier_id"] for c in message["couriers"]] == [7]

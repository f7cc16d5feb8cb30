"""The arrival prediction learns from Pinot: per-restaurant kitchen times (with fallbacks),
courier speed by hour of day and the route factor from GPS trails; its range narrows as
the order moves.

The statistics aggregate every restaurant's orders of the last hours and days, and the
run's Pinot holds every test's: so each test here lives at a moment of its own in the
past (:func:`clock`), earlier than every test before it, where the windows hold its
orders alone (later moments are outside them, earlier ones hold no orders yet)."""

from __future__ import annotations

import time

import pytest

from contract import geo
from contract.events import LIFECYCLE, now_ms
from tests.fixtures_pinot import ID_BLOCK, delivery_event, order_event
from tracker.cache import statistics as eta_cache
from tracker.tracking import eta
from tracker.tracking.eta import stats as eta_stats
from tracker.tracking.selectors import orders as order_selectors

pytestmark = pytest.mark.eta_history

SEC, MIN, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
# order_event's restaurant and door (Berlin), 1.75 km apart in a straight line
RESTAURANT, DOOR = (52.52, 13.40), (52.53, 13.42)
STRAIGHT_KM = geo.haversine_km(*RESTAURANT, *DOOR)


def delivered(oid, restaurant_id, placed, steps_s, ride_s=300, door_s=60):
    """A delivered order: ``steps_s`` seconds in each kitchen step, then the ride and door."""
    times, at = {}, placed
    for status, seconds in zip(LIFECYCLE, [*steps_s, ride_s, door_s, 0], strict=True):
        times[status.value] = at
        at += seconds * SEC
    return order_event(
        oid, 7, "DELIVERED", restaurant_id=restaurant_id, created_at=placed,
        status_time=times["DELIVERED"], status_times=times,
    )  # fmt: skip


#: The latest of the tests' moments, and how far apart two tests' moments are.
LATEST_MOMENT = 1_704_067_200_000  # 2024-01-01 UTC
MOMENT_SPACING = 15 * DAY  # past the longest window (7 days of rides)


def clock(pinot) -> int:
    """This test's "now": earlier than every earlier test's, by the order of id blocks."""
    block = pinot.base // ID_BLOCK % 512
    return LATEST_MOMENT - block * MOMENT_SPACING + 10 * HOUR


def trip(restaurant_id, status="PLACED_ORDER", *, at, km_left=None):
    return eta.Trip(restaurant_id, status, at, RESTAURANT, DOOR, km_left)


def test_each_restaurant_gets_its_own_kitchen_times_and_a_new_one_falls_back(pinot):
    fast, slow, new = pinot.base + 1, pinot.base + 2, pinot.base + 3
    now = clock(pinot)
    empty = eta.load_statistics(now)
    first = eta.predict(trip(fast, at=now), empty, now)
    assert first.basis["kitchen"] == "default" and first.basis["speed"] == "default"

    start = now - 90 * MIN
    pinot.publish(
        *[delivered(pinot.base + 100 + i, fast, start + i * MIN, [30, 30, 30, 30]) for i in range(12)],
        *[delivered(pinot.base + 200 + i, slow, start + i * MIN, [300, 300, 300, 300]) for i in range(12)],
    )  # fmt: skip
    pinot.sync()
    stats = eta.load_statistics(now)
    later = now + 12 * HOUR  # an hour of day with no history: each kitchen's recent spans
    fast_eta, slow_eta, new_eta = (
        eta.predict(trip(r, at=later), stats, later) for r in (fast, slow, new)
    )
    assert (fast_eta.basis["kitchen"], fast_eta.basis["kitchen_samples"]) == ("restaurant", 12)
    assert slow_eta.basis["kitchen"] == "restaurant"
    assert new_eta.basis["kitchen"] == "all_restaurants"
    # the kitchens differ by 4 x 270 s; the ride and the door are the same
    assert slow_eta.arrives_at - fast_eta.arrives_at == 4 * 270 * SEC
    assert fast_eta.arrives_at <= new_eta.arrives_at <= slow_eta.arrives_at
    # the ride: 1.75 km learned at 1.75 km / 300 s, the door 60 s, the kitchen 120 s
    assert fast_eta.arrives_at - later == (120 + 300 + 60) * SEC
    assert fast_eta.basis["speed"] == "all_hours"  # fewer than 10 rides in any one hour


def test_the_range_holds_the_centre_and_narrows_as_the_order_moves(pinot):
    r = pinot.base + 1
    now = clock(pinot)
    start = now - 100 * MIN
    pinot.publish(
        *[
            delivered(pinot.base + 100 + i, r, start + i * 3 * MIN,
                      [20 + 5 * i, 40 + 10 * i, 60 + 15 * i, 120 + 30 * i], ride_s=240 + 20 * i,
                      door_s=30 + 5 * i)
            for i in range(20)
        ]
    )  # fmt: skip
    pinot.sync()
    stats = eta.load_statistics(now)
    steps = [trip(r, s.value, at=now) for s in LIFECYCLE[:4]]
    steps += [trip(r, "OUT_FOR_DELIVERY", at=now, km_left=STRAIGHT_KM)]
    steps += [trip(r, "OUT_FOR_DELIVERY", at=now, km_left=STRAIGHT_KM / 2)]
    steps += [trip(r, "ARRIVING_AT_DOOR", at=now)]
    predictions = [eta.predict(t, stats, now) for t in steps]
    widths = []
    for p in predictions:
        assert now <= p.earliest < p.arrives_at < p.latest
        widths.append(p.latest - p.earliest)
    assert widths == sorted(widths, reverse=True) and widths[0] > 2 * widths[-2]
    assert eta.predict(trip(r, "DELIVERED", at=now), stats, now) is None
    assert eta.predict(trip(r, "CANCELLED", at=now), stats, now) is None

    # A kitchen far behind its usual pace: still the ride and the door ahead, never the past.
    late = eta.predict(trip(r, "BEING_COOKED", at=now - HOUR), stats, now)
    on_road = predictions[4]
    assert late.arrives_at == on_road.arrives_at and late.earliest >= now


def test_courier_speed_by_hour_of_day_and_the_route_factor_come_from_past_rides(pinot):
    r = pinot.base + 1
    now = clock(pinot)
    quiet = now - 2 * DAY - now % HOUR  # an hour two days ago, and the hour after it
    busy = quiet + HOUR
    orders = [
        delivered(pinot.base + 100 + i, r, quiet + i * MIN, [1, 1, 1, 1], ride_s=300)
        for i in range(10)
    ]
    orders += [
        delivered(pinot.base + 200 + i, r, busy + i * MIN, [1, 1, 1, 1], ride_s=600)
        for i in range(10)
    ]
    # One ride's GPS trail along the streets: east, then north (an L, not the diagonal).
    corner = (RESTAURANT[0], DOOR[1])
    trail = [geo.interpolate(*RESTAURANT, *corner, f / 20) for f in range(21)]
    trail += [geo.interpolate(*corner, *DOOR, f / 20) for f in range(1, 21)]
    last = orders[-1]
    points = [
        delivery_event(last.order_id, v, lat, lon, at=last.out_for_delivery_at + v * 10 * SEC, restaurant_id=r)
        for v, (lat, lon) in enumerate(trail, start=1)
    ]  # fmt: skip
    pinot.publish(*orders, *points)
    pinot.sync()
    stats = eta.load_statistics(now)
    travelled = geo.haversine_km(*RESTAURANT, *corner) + geo.haversine_km(*corner, *DOOR)
    assert abs(stats.route_factor - travelled / STRAIGHT_KM) < 0.01 and stats.route_samples == 1

    def ride_seconds(leaving: int) -> float:
        p = eta.predict(
            trip(r, "OUT_FOR_DELIVERY", at=leaving, km_left=STRAIGHT_KM), stats, leaving
        )
        assert p.basis["speed"] == "hour_of_day"
        assert p.basis["route_km_left"] == round(STRAIGHT_KM * stats.route_factor, 2)
        return (p.arrives_at - leaving) / SEC - 60  # less the door

    assert round(ride_seconds(quiet + DAY + 30 * MIN)) == 300  # the same hour, a day later
    assert round(ride_seconds(busy + DAY + 30 * MIN)) == 600


def test_the_process_cache_serves_reads_without_querying(pinot):
    """At the real moment (the cache loads as of now): this restaurant's figures only."""
    r = pinot.base + 1

    def orders(first: int) -> list:
        start = now_ms() - HOUR
        return [
            delivered(pinot.base + 100 + i, r, start + i * MIN, [60] * 4)
            for i in range(first, first + 10)
        ]

    pinot.publish(*orders(0))
    pinot.sync()
    loaded = eta.refresh()
    assert loaded.kitchen[r].door.samples == 10
    # Ten more in Pinot: the cached statistics answer until the next refresh.
    pinot.publish(*orders(10))
    pinot.sync()
    assert eta.current_statistics() is loaded
    assert eta.refresh().kitchen[r].door.samples == 20


def test_a_kitchen_is_its_recent_pace_times_every_kitchens_level_at_this_hour_of_day(pinot):
    fast, slow, new, other = (pinot.base + i for i in (1, 2, 3, 4))
    now = clock(pinot)
    # A day and a half ago, in one hour, kitchens took 600 s from placement to pickup.
    then = now - 36 * HOUR - now % HOUR
    orders = [delivered(pinot.base + 100 + i, other, then + i * MIN, [150] * 4) for i in range(12)]
    # The last two hours: one kitchen three times as slow as the other, which has most of
    # the orders (so its pace is every kitchen's median).
    recent = now - 90 * MIN
    orders += [delivered(pinot.base + 200 + i, fast, recent + i * MIN, [30] * 4) for i in range(13)]
    orders += [delivered(pinot.base + 300 + i, slow, recent + i * MIN, [90] * 4) for i in range(11)]
    pinot.publish(*orders)
    pinot.sync()
    stats = eta.load_statistics(now)
    same_hour = then + DAY + 5 * MIN  # the hour of day of the 600 s kitchens, a day later
    fast_eta, slow_eta, new_eta = (
        eta.predict(trip(r, at=same_hour), stats, same_hour) for r in (fast, slow, new)
    )
    assert fast_eta.basis["kitchen"] == slow_eta.basis["kitchen"] == "restaurant_by_hour"
    assert new_eta.basis["kitchen"] == "hour_of_day"
    assert new_eta.basis["seconds_ahead"]["kitchen"] == 600
    # the pace (1x and 3x every recent kitchen's median), applied to the hour's level
    assert fast_eta.basis["seconds_ahead"]["kitchen"] == 600
    assert slow_eta.basis["seconds_ahead"]["kitchen"] == 1800
    # The ride and the door are the same for all three.
    assert len({(p.basis["seconds_ahead"]["ride"], p.basis["seconds_ahead"]["door"])
                for p in (fast_eta, slow_eta, new_eta)}) == 1  # fmt: skip


def test_the_route_factor_follows_the_direction_of_travel(pinot):
    """Rides straight along a street are not stretched by the detours of rides across
    the grain, so after the street corner the rest of a ride is not overestimated."""
    r = pinot.base + 1
    now = clock(pinot)
    east = (RESTAURANT[0], DOOR[1])  # due east of the restaurant, 1.35 km
    orders, points = [], []
    for i in range(12):  # six rides along the street east, six across it by an L
        order = delivered(pinot.base + 100 + i, r, now - HOUR + i * MIN, [1, 1, 1, 1])
        corner = east if i % 2 else (RESTAURANT[0], (RESTAURANT[1] + DOOR[1]) / 2)
        end = east if i % 2 else DOOR
        legs = [(RESTAURANT, corner), (corner, end)] if corner != end else [(RESTAURANT, end)]
        trail = [geo.interpolate(*a, *b, f / 20) for a, b in legs for f in range(21)]
        orders.append(order)
        points += [
            delivery_event(order.order_id, v, lat, lon, restaurant_id=r,
                           at=order.out_for_delivery_at + v * 10 * SEC)
            for v, (lat, lon) in enumerate(trail, start=1)
        ]  # fmt: skip
    pinot.publish(*orders, *points)
    pinot.sync()
    stats = eta.load_statistics(now)
    assert stats.route_samples == 12 and stats.route_factor > 1.05

    def on_road(courier):
        km = geo.haversine_km(*courier, *DOOR)
        t = eta.Trip(r, "OUT_FOR_DELIVERY", now, RESTAURANT, DOOR, km, courier)
        return eta.predict(t, stats, now).basis

    along = on_road((DOOR[0], RESTAURANT[1]))  # past the corner: due east to the door
    across = on_road(RESTAURANT)  # the whole way, across the grain
    assert along["route_factor"] == 1.0
    assert along["route_km_left"] == round(geo.haversine_km(DOOR[0], RESTAURANT[1], *DOOR), 2)
    assert across["route_factor"] > stats.route_factor > along["route_factor"]


def test_the_route_factor_reads_every_sampled_ride_in_thinned_slices(pinot, monkeypatch):
    """Pinot returns one point per slot of a trail, a few orders per query: every sampled
    ride counts, however many points it sent (a worker once parsed a million points at
    each load, and the query's row limit cut the sample to the lowest order ids)."""
    r = pinot.base + 1
    now = clock(pinot)
    corner = (RESTAURANT[0], DOOR[1])
    legs = [(RESTAURANT, corner), (corner, DOOR)]
    trail = [geo.interpolate(*a, *b, f / 200) for a, b in legs for f in range(201)]
    orders, points = [], []
    for i in range(5):  # five rides by the same L, a point every second
        order = delivered(pinot.base + 100 + i, r, now - HOUR + i * MIN, [1, 1, 1, 1])
        orders.append(order)
        points += [
            delivery_event(order.order_id, v, lat, lon, restaurant_id=r,
                           at=order.out_for_delivery_at + v * SEC)
            for v, (lat, lon) in enumerate(trail, start=1)
        ]  # fmt: skip
    pinot.publish(*orders, *points)
    pinot.sync()
    asked = []
    real_query = order_selectors.query

    def counted(sql, params=None):
        rows = real_query(sql, params)
        asked.append(len(rows))
        return rows

    monkeypatch.setattr(order_selectors, "query", counted)
    trails = order_selectors.thinned_trails(
        [o.order_id for o in orders], eta_stats.TRAIL_SLOT_MS, per_query=2
    )
    assert len(asked) == 3  # 2 + 2 + 1 orders
    assert sorted(trails) == sorted(o.order_id for o in orders)
    slots = {(o.out_for_delivery_at + v * SEC) // eta_stats.TRAIL_SLOT_MS
             for o in orders[:1] for v in range(1, len(trail) + 1)}  # fmt: skip
    assert all(len(t) == len(slots) for t in trails.values())  # one point per slot
    assert trails[orders[0].order_id][-1] == pytest.approx(DOOR)  # each slot's last point

    stats = eta.load_statistics(now)
    travelled = geo.haversine_km(*RESTAURANT, *corner) + geo.haversine_km(*corner, *DOOR)
    assert stats.route_samples == 5
    assert abs(stats.route_factor - travelled / STRAIGHT_KM) < 0.01


def test_the_processes_share_a_windows_statistics_through_redis(pinot, on_redis, monkeypatch):
    """One process of all the replicas runs the statistics' queries each window; the others
    read its copy from Redis, keep what they had while it is being loaded (and look again
    soon), and load their own when Redis is away. A "process" here is the module's own
    cache, emptied."""
    monkeypatch.setenv("ETA_REFRESH_SECONDS", str(30 * 24 * 3600))  # one window all test long
    step = 30 * DAY
    window = now_ms() - now_ms() % step
    r = pinot.base + 1
    pinot.publish(*[
        delivered(pinot.base + 100 + i, r, window - HOUR + i * MIN, [60] * 4) for i in range(10)
    ])  # fmt: skip
    pinot.sync()
    loads = []
    real_load = eta_cache.load_statistics
    monkeypatch.setattr(
        eta_cache, "load_statistics", lambda **kw: loads.append(kw) or real_load(**kw)
    )
    key = eta_cache.selectors.broker_url()

    def new_process() -> None:
        monkeypatch.setattr(eta_cache, "_cache", {})

    new_process()
    first = eta_cache._load(key)
    assert first.kitchen[r].door.samples == 10 and loads == [{"as_of_ms": window}]
    new_process()
    second = eta_cache._load(key)
    assert second == first and second is not first and len(loads) == 1  # Redis's copy

    assert len(on_redis.keys("*eta-statistics*")) == 2  # the copy and the claim
    eta_cache.caches["default"].delete(eta_cache.SHARED_KEY.format(key, window))
    new_process()
    waiting = eta_cache._load(key)
    assert waiting == eta.Statistics() and len(loads) == 1  # defaults, no query
    looks_again_in = eta_cache._cache[key][1] + eta_cache.refresh_seconds() - time.monotonic()
    assert 0 < looks_again_in <= eta_cache.RETRY_SECONDS

    on_redis.stop()
    new_process()
    assert eta_cache._load(key) == first and len(loads) == 2  # Redis away: its own load

"""When an order will arrive: a prediction with a range, from placement to the door.

The statistics come from Pinot through the selectors, over orders already delivered:

* **kitchen**: percentiles of the time from entering each kitchen step to the food
  leaving. Kitchens fill up and empty with the hour of day, and some kitchens are slower
  than others: the level is every restaurant's spans by local hour of placement
  (``DJANGO_TIME_ZONE``) over the last ``ETA_TRAVEL_WINDOW_DAYS``, and a restaurant's pace
  is the ratio of its median spans to every restaurant's over the same orders of the last
  ``ETA_KITCHEN_WINDOW_MINUTES`` (the hour's load is in both and cancels out). Each span is
  measured end to end, so a kitchen that is slow at every step at once is not understated
  by adding steps. Fallbacks: a restaurant with fewer than ``ETA_MIN_SAMPLES`` orders in the
  window gets the hour's level, or every restaurant's recent spans; an hour without data
  the restaurant's own recent spans; with no data at all, :data:`DEFAULT_TO_PICKUP`.
* **door**: the time from arriving at the door to delivered, every restaurant together.
* **ride**: courier speed by local hour of day over the last ``ETA_TRAVEL_WINDOW_DAYS``,
  measured as straight-line distance from restaurant to door over the ride's time, so
  traffic and the streets' detours are both in it.
* **route factor**: the observed travelled distance (GPS trail, thinned to points 100 m
  apart so a few metres of GPS noise do not add up) over the straight line, from the last
  ``ROUTE_SAMPLE_ORDERS`` deliveries, overall and by direction of travel: streets make a
  ride along them shorter than one across their grain. The straight line left, from the
  courier once on the road, times this direction's factor over the overall one scales the
  ride; so after a street corner, with the rest straight along a street, it is not
  overestimated.

The prediction adds the parts still ahead: the kitchen span from the current step (less
the time already spent in it, never less than the next step's span), the ride (distance
left over the speed of the hour the courier is expected to leave) and the door time. The
centre is the sum of the medians; the range is the centre minus and plus the root sum of
squares of each part's spread to its 10th and 90th percentile (the parts are independent:
the kitchen, the road and the door), so it narrows as parts are done.

One process-wide cache holds the statistics: the first read loads them (five queries and
two for the trails), later reads never wait; a read after ``ETA_REFRESH_SECONDS`` starts
a refresh in the background. When Pinot cannot answer, the defaults stand in (the basis
says so) and the load is retried later.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any, TypeVar

from django.utils import timezone

from contract import geo
from contract.events import (
    LIFECYCLE,
    OrderEnriched,
    OrderStatus,
    now_ms,
)
from runtime.conf import env_float, env_int
from tracker.tracking import selectors
from tracker.tracking.exceptions import TrackingUnavailable
from tracker.tracking.selectors import KITCHEN_STEPS, KitchenTimes, Spread

if TYPE_CHECKING:
    from tracker.orders.models import Order

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The range shown is LOW-HIGH around the median MID.
LOW, MID, HIGH = PERCENTILES = (10, 50, 90)
MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
#: Trail points are kept only this far apart (m) when measuring travelled distance.
TRAIL_STEP_KM = 0.1
ROUTE_SAMPLE_ORDERS = 1000
#: The route factor is learned per direction of travel, in buckets this wide (degrees,
#: folded to [0, 180): a street runs both ways), from at least this many rides each.
BEARING_BUCKET_DEG = 5
BEARING_MIN_SAMPLES = 5


def _spread(mid: float, low: float, high: float) -> Spread:
    return Spread(0, {LOW: low, MID: mid, HIGH: high})


def _defaults() -> tuple[dict[str, Spread], Spread, Spread]:
    """For a city with no history yet: a common kitchen (2, 3, 5, 8 minutes in the four
    steps), a minute at the door, 20 km/h on roads 1.3x the straight line (a street grid
    is 4/pi = 1.27x); the 10th/90th percentiles at 0.7x/1.4x the median (0.75x/1.25x speed)."""
    per_step = dict(zip([s.value for s in KITCHEN_STEPS], (120, 180, 300, 480), strict=True))
    to_pickup, left = {}, 0.0
    for status in reversed(KITCHEN_STEPS):
        left += per_step[status.value]
        to_pickup[status.value] = _spread(left, 0.7 * left, 1.4 * left)
    speed = geo.COURIER_SPEED_KMH / DEFAULT_ROUTE_FACTOR
    return to_pickup, _spread(60, 40, 90), _spread(speed, 0.75 * speed, 1.25 * speed)


DEFAULT_ROUTE_FACTOR = 1.3
DEFAULT_TO_PICKUP, DEFAULT_DOOR, DEFAULT_SPEED = _defaults()


def refresh_seconds() -> float:
    return env_float("ETA_REFRESH_SECONDS", 300.0)


@dataclass(frozen=True)
class Statistics:
    """What the predictor knows of the city at ``as_of`` (epoch ms; 0: nothing yet)."""

    as_of: int = 0
    kitchen: dict[int, KitchenTimes] = field(default_factory=dict)
    kitchen_all: KitchenTimes | None = None
    #: Every restaurant's kitchen by local hour of placement, over the travel window.
    kitchen_by_hour: dict[int, KitchenTimes] = field(default_factory=dict)
    #: Straight-line km/h by local hour of day, and over all hours.
    speeds: dict[int, Spread] = field(default_factory=dict)
    speed_all: Spread | None = None
    route_factor: float = DEFAULT_ROUTE_FACTOR
    route_samples: int = 0
    #: Route factor by bearing bucket (see :data:`BEARING_BUCKET_DEG`).
    route_by_bearing: dict[int, float] = field(default_factory=dict)
    #: The zone's offset from UTC when loaded, for the hour of day.
    utc_offset_ms: int = 0


def _utc_offset_ms(at_ms: int) -> int:
    moment = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    offset = moment.astimezone(timezone.get_default_timezone()).utcoffset()
    return int(offset.total_seconds() * 1000) if offset else 0


def _travelled_km(trail: list[selectors.CourierPosition]) -> tuple[float, float, float]:
    """(travelled km along the thinned trail, straight km from its first to last point,
    the bearing of that straight line)."""
    if len(trail) < 2:
        return 0.0, 0.0, 0.0
    kept = [trail[0]]
    for point in trail[1:]:
        if geo.haversine_km(kept[-1].lat, kept[-1].lon, point.lat, point.lon) >= TRAIL_STEP_KM:
            kept.append(point)
    if kept[-1] is not trail[-1]:
        kept.append(trail[-1])
    path = sum(geo.haversine_km(a.lat, a.lon, b.lat, b.lon) for a, b in pairwise(kept))
    first, last = trail[0], trail[-1]
    return (
        path,
        geo.haversine_km(first.lat, first.lon, last.lat, last.lon),
        geo.bearing_deg(first.lat, first.lon, last.lat, last.lon),
    )


def _by_bearing(travelled: list[tuple[float, float, float]]) -> dict[int, float]:
    """Route factor (travelled over straight) per bearing bucket with enough rides."""
    buckets: dict[int, list[tuple[float, float]]] = {}
    for path, line, bearing in travelled:
        buckets.setdefault(int(bearing % 180 // BEARING_BUCKET_DEG), []).append((path, line))
    return {
        b: max(1.0, sum(p for p, _ in rides) / sum(line for _, line in rides))
        for b, rides in buckets.items()
        if len(rides) >= BEARING_MIN_SAMPLES
    }


def load_statistics(as_of_ms: int | None = None) -> Statistics:
    """The statistics from Pinot, over orders delivered at or before ``as_of_ms`` (now)."""
    as_of = now_ms() if as_of_ms is None else int(as_of_ms)
    kitchen_since = as_of - env_float("ETA_KITCHEN_WINDOW_MINUTES", 120.0) * MINUTE_MS
    travel_since = as_of - env_float("ETA_TRAVEL_WINDOW_DAYS", 7.0) * DAY_MS
    minimum = env_int("ETA_MIN_SAMPLES", 10)
    kitchen = {
        k.restaurant_id: k
        for k in selectors.kitchen_times(kitchen_since, as_of, PERCENTILES, by_restaurant=True)
        if k.door.samples >= minimum and k.restaurant_id is not None
    }
    every = selectors.kitchen_times(kitchen_since, as_of, PERCENTILES, by_restaurant=False)
    offset = _utc_offset_ms(as_of)
    by_hour = selectors.kitchen_times(
        travel_since, as_of, PERCENTILES, by_restaurant=False, hour_offset_ms=offset
    )
    speeds = selectors.ride_speeds(travel_since, as_of, PERCENTILES, hour_offset_ms=offset)
    speed_all = selectors.ride_speeds(travel_since, as_of, PERCENTILES).get(None)
    trails = selectors.courier_paths(
        selectors.recently_delivered(travel_since, as_of, ROUTE_SAMPLE_ORDERS), limit=100_000
    )
    travelled = [_travelled_km(t) for t in trails.values()]
    travelled = [ride for ride in travelled if ride[1] >= 0.5]
    straight = sum(line for _, line, _ in travelled)
    return Statistics(
        as_of=as_of,
        kitchen=kitchen,
        kitchen_all=every[0] if every and every[0].door.samples >= minimum else None,
        kitchen_by_hour={k.hour: k for k in by_hour if k.door.samples >= minimum},
        speeds={h: s for h, s in speeds.items() if s.samples >= minimum},
        speed_all=speed_all if speed_all and speed_all.samples >= minimum else None,
        route_factor=(
            max(1.0, sum(path for path, _, _ in travelled) / straight)
            if straight
            else DEFAULT_ROUTE_FACTOR
        ),
        route_samples=len(travelled),
        route_by_bearing=_by_bearing(travelled),
        utc_offset_ms=offset,
    )


# ---------------------------------------------------------------------- prediction


@dataclass(frozen=True)
class Trip:
    """What the prediction needs of an order: where it is in its life and where it goes."""

    restaurant_id: int
    status: str
    #: When the order entered ``status`` (epoch ms).
    status_time: int
    restaurant: tuple[float, float]
    destination: tuple[float, float]
    #: Straight-line km from the courier to the door, once on the road.
    distance_left_km: float | None = None
    #: The courier's last known position, once on the road.
    courier: tuple[float, float] | None = None

    @classmethod
    def of_enriched(cls, event: OrderEnriched) -> Trip:
        return cls(
            event.restaurant_id, event.status, event.status_time,
            (event.restaurant_lat, event.restaurant_lon),
            (event.delivery_lat, event.delivery_lon), event.distance_left_km,
            (event.courier_lat, event.courier_lon)
            if event.courier_lat is not None and event.courier_lon is not None else None,
        )  # fmt: skip

    @classmethod
    def of_order(cls, order: Order, status: str, status_time: int) -> Trip:
        """From the system of record (before the pipeline has seen the order)."""
        return cls(
            order.restaurant_id, status, status_time,
            (order.restaurant.lat, order.restaurant.lon),
            (order.delivery_lat, order.delivery_lon),
        )  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    """Epoch ms: the likely arrival and its range; ``basis`` says what it rests on."""

    arrives_at: int
    earliest: int
    latest: int
    computed_at: int
    basis: dict[str, Any]


_ACTIVE = {s.value for s in LIFECYCLE if s is not OrderStatus.DELIVERED}


def predict(trip: Trip, stats: Statistics, now: int) -> Prediction | None:
    """The arrival of an order on its way; None once it is delivered or cancelled."""
    status = trip.status
    if status not in _ACTIVE:
        return None
    elapsed = max(0.0, (now - trip.status_time) / 1000)
    parts: list[dict[int, float]] = []
    basis: dict[str, Any] = {"stats_as_of": stats.as_of or None}
    kitchen_steps = [s.value for s in KITCHEN_STEPS]
    if status in kitchen_steps:
        times, basis["kitchen"], basis["kitchen_samples"] = _kitchen(trip.restaurant_id, stats, now)
        following = kitchen_steps[kitchen_steps.index(status) + 1 :]
        floor = times[following[0]] if following else dict.fromkeys(PERCENTILES, 0)
        spans = times[status]
        parts.append({p: max(spans[p] - elapsed, floor[p]) for p in PERCENTILES})
    if status in kitchen_steps or status == OrderStatus.OUT_FOR_DELIVERY:
        on_road = status == OrderStatus.OUT_FOR_DELIVERY
        origin = (trip.courier if on_road else None) or trip.restaurant
        km = trip.distance_left_km if on_road else None
        if km is None:
            km = geo.haversine_km(*origin, *trip.destination)
        leaves = now + (parts[0][MID] * 1000 if parts else 0)
        speed, basis["speed"] = _speed(stats, leaves)
        # Speeds are over the straight line of whole rides, whose streets are on average
        # route_factor longer; this way's streets may be longer or shorter than that.
        factor = _route_factor(stats, geo.bearing_deg(*origin, *trip.destination))
        longer = factor / stats.route_factor
        # The slow percentile of speed is the late one of time.
        parts.append({p: km * longer / speed.values[100 - p] * 3600 for p in PERCENTILES})
        basis["route_km_left"] = round(km * factor, 2)
        basis["speed_kmh"] = round(speed.values[MID] * stats.route_factor, 1)
        basis["route_factor"] = round(factor, 2)
        door = (stats.kitchen_all.door if stats.kitchen_all else DEFAULT_DOOR).values
        parts.append(door)
    else:  # at the door
        door = (stats.kitchen_all.door if stats.kitchen_all else DEFAULT_DOOR).values
        parts.append({p: max(door[p] - elapsed, 0.0) for p in PERCENTILES})
    names = ("kitchen", "ride", "door")[-len(parts) :]
    basis["seconds_ahead"] = {
        name: round(part[MID]) for name, part in zip(names, parts, strict=True)
    }
    mid = sum(part[MID] for part in parts)
    below = math.sqrt(sum((part[MID] - part[LOW]) ** 2 for part in parts))
    above = math.sqrt(sum((part[HIGH] - part[MID]) ** 2 for part in parts))
    return Prediction(
        arrives_at=now + round(mid * 1000),
        earliest=now + round(max(mid - below, 0.0) * 1000),
        latest=now + round((mid + above) * 1000),
        computed_at=now,
        basis=basis,
    )


def promised_arrival(trip: Trip, stats: Statistics, picked_up_at: int) -> int | None:
    """The arrival predicted when the courier picked the order up (epoch ms): from the
    restaurant, at that moment. Derived, not remembered, so a restarted process agrees."""
    at_pickup = replace(
        trip,
        status=OrderStatus.OUT_FOR_DELIVERY.value,
        status_time=picked_up_at,
        distance_left_km=None,
        courier=None,
    )
    prediction = predict(at_pickup, stats, picked_up_at)
    return None if prediction is None else prediction.arrives_at


def running_late_seconds(trip: Trip, stats: Statistics, now: int, promised: int) -> int | None:
    """How far the order's arrival predicted now runs behind ``promised`` (seconds;
    negative: ahead). None once it is delivered or cancelled."""
    prediction = predict(trip, stats, now)
    return None if prediction is None else round((prediction.arrives_at - promised) / 1000)


def _kitchen(
    restaurant_id: int, stats: Statistics, now: int
) -> tuple[dict[str, dict[int, float]], str, int]:
    """Seconds from entering each kitchen step to pickup, by percentile; what they rest on
    and on how many of the restaurant's orders.

    Kitchens fill up and empty with the hour, so the level is every restaurant's for this
    time of day; the restaurant is that times its pace, the ratio of its median span to
    every restaurant's over the same recent orders (where the hour's load cancels out), and
    keeps its own spread around it."""
    own = stats.kitchen.get(restaurant_id)
    level = _kitchen_at_hour(stats, now)
    if own is not None:
        mine = {step: spread.values for step, spread in own.to_pickup.items()}
        if level is None or stats.kitchen_all is None:
            return mine, "restaurant", own.door.samples
        spans = {}
        for step, values in mine.items():
            every = stats.kitchen_all.to_pickup[step].values[MID]
            pace = values[MID] / every if every > 0 else 1.0
            mid = level[step][MID] * pace
            spans[step] = {
                p: mid * values[p] / values[MID] if values[MID] > 0 else mid for p in PERCENTILES
            }
        return spans, "restaurant_by_hour", own.door.samples
    if level is not None:
        return level, "hour_of_day", 0
    if stats.kitchen_all is not None:
        every = {step: spread.values for step, spread in stats.kitchen_all.to_pickup.items()}
        return every, "all_restaurants", 0
    return {step: spread.values for step, spread in DEFAULT_TO_PICKUP.items()}, "default", 0


def _kitchen_at_hour(stats: Statistics, now: int) -> dict[str, dict[int, float]] | None:
    """Every restaurant's spans at this time of day, between the figures of the two
    nearest hours (a rush builds up over the hour); None without either."""
    hour = (now + stats.utc_offset_ms) % DAY_MS / HOUR_MS
    *near, weight = _nearest_two(stats.kitchen_by_hour, hour, 24)
    if near[0] is None or near[1] is None:
        known = near[0] or near[1]
        return {s: v.values for s, v in known.to_pickup.items()} if known else None
    return {
        step: {
            p: (1 - weight) * spread.values[p] + weight * near[1].to_pickup[step].values[p]
            for p in PERCENTILES
        }
        for step, spread in near[0].to_pickup.items()
    }


def _route_factor(stats: Statistics, bearing: float) -> float:
    """The learned route factor for this direction of travel, between the two nearest
    bearing buckets; the overall one where they are not known."""
    a, b, weight = _nearest_two(
        stats.route_by_bearing, bearing % 180 / BEARING_BUCKET_DEG, 180 // BEARING_BUCKET_DEG
    )
    if a is None or b is None:
        return a or b or stats.route_factor
    return (1 - weight) * a + weight * b


def _nearest_two(
    table: dict[int, T], position: float, size: int
) -> tuple[T | None, T | None, float]:
    """The entries of the two buckets around ``position`` (bucket ``i`` centred on
    ``i + 0.5``, wrapping at ``size``) and the weight of the second."""
    position -= 0.5
    below = math.floor(position)
    return table.get(below % size), table.get((below + 1) % size), position - below


def _speed(stats: Statistics, at_ms: int) -> tuple[Spread, str]:
    hour = int((at_ms + stats.utc_offset_ms) % DAY_MS // HOUR_MS)
    if hour in stats.speeds:
        return stats.speeds[hour], "hour_of_day"
    if stats.speed_all is not None:
        return stats.speed_all, "all_hours"
    return DEFAULT_SPEED, "default"


# ---------------------------------------------------------------------- the process cache

_lock = threading.Lock()
#: Broker URL -> (statistics, monotonic time loaded); the URLs whose refresh is running.
_cache: dict[str, tuple[Statistics, float]] = {}
_refreshing: set[str] = set()
#: A failed load is retried after this many seconds (the defaults stand in meanwhile).
RETRY_SECONDS = 15.0


def _load(key: str) -> Statistics:
    """Statistics as of the start of the current refresh window: every process (each web
    worker keeps its own) then predicts from the same numbers, so one order reads the same
    whichever worker answers (and its ETag holds), and all move on at the window's end."""
    step_ms = int(refresh_seconds() * 1000)
    now = now_ms()
    window = now - now % step_ms
    try:
        stats = load_statistics(as_of_ms=window)
        loaded = time.monotonic() - (now - window) / 1000
    except TrackingUnavailable as exc:
        log.warning("ETA statistics not loaded (defaults meanwhile): %s", exc)
        stats = _cache.get(key, (Statistics(), 0.0))[0]
        loaded = time.monotonic() - refresh_seconds() + RETRY_SECONDS
    with _lock:
        _cache[key] = (stats, loaded)
        _refreshing.discard(key)
    return stats


def current_statistics() -> Statistics:
    """The cached statistics of this process's Pinot; loads them on first use, and starts
    a background refresh when they are older than ``ETA_REFRESH_SECONDS``."""
    key = selectors.broker_url()
    with _lock:
        cached = _cache.get(key)
        stale = cached is None or time.monotonic() - cached[1] > refresh_seconds()
        start = stale and key not in _refreshing
        if start:
            _refreshing.add(key)
    if cached is None:
        return _load(key) if start else Statistics()
    if start:
        threading.Thread(target=_load, args=(key,), name="eta-refresh", daemon=True).start()
    return cached[0]


def refresh() -> Statistics:
    """Load the statistics now (tests, and a process that wants them warm at start)."""
    key = selectors.broker_url()
    with _lock:
        _refreshing.add(key)
    return _load(key)

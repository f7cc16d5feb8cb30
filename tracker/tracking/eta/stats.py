"""What the arrival prediction knows of the city, measured in Pinot through the selectors
over orders already delivered:

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

With no history (or Pinot unreachable) the defaults stand in: a common kitchen, a minute
at the door, city speed on a street grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise

from django.utils import timezone

from contract import geo
from contract.events import now_ms
from runtime.conf import env_float, env_int
from tracker.tracking import selectors
from tracker.tracking.selectors import KITCHEN_STEPS, KitchenTimes, Spread

#: The range shown is LOW-HIGH around the median MID.
LOW, MID, HIGH = PERCENTILES = (10, 50, 90)
MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
#: Trail points are kept only this far apart (m) when measuring travelled distance.
TRAIL_STEP_KM = 0.1
#: Pinot keeps one point per this many ms of a trail: at 72 km/h a courier covers 100 m in
#: 5 s, so nothing the 100 m thinning would keep is lost.
TRAIL_SLOT_MS = 5_000
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


def _travelled_km(trail: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(travelled km along the trail of (lat, lon), thinned to points ``TRAIL_STEP_KM``
    apart, straight km from its first to last point, the bearing of that straight line)."""
    if len(trail) < 2:
        return 0.0, 0.0, 0.0
    kept = [trail[0]]
    for point in trail[1:]:
        if geo.haversine_km(*kept[-1], *point) >= TRAIL_STEP_KM:
            kept.append(point)
    if kept[-1] is not trail[-1]:
        kept.append(trail[-1])
    path = sum(geo.haversine_km(*a, *b) for a, b in pairwise(kept))
    first, last = trail[0], trail[-1]
    return path, geo.haversine_km(*first, *last), geo.bearing_deg(*first, *last)


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
    trails = selectors.thinned_trails(
        selectors.recently_delivered(travel_since, as_of, ROUTE_SAMPLE_ORDERS), TRAIL_SLOT_MS
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

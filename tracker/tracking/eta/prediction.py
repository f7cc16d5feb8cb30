"""When an order will arrive: a prediction with a range, from placement to the door.

The prediction adds the parts still ahead: the kitchen span from the current step (less
the time already spent in it, never less than the next step's span), the ride (distance
left over the speed of the hour the courier is expected to leave) and the door time. The
centre is the sum of the medians; the range is the centre minus and plus the root sum of
squares of each part's spread to its 10th and 90th percentile (the parts are independent:
the kitchen, the road and the door), so it narrows as parts are done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from contract import geo
from contract.events import LIFECYCLE, DeliveryStatus, OrderEnriched, OrderStatus
from tracker.tracking.eta.stats import (
    BEARING_BUCKET_DEG,
    DAY_MS,
    DEFAULT_DOOR,
    DEFAULT_SPEED,
    DEFAULT_TO_PICKUP,
    HIGH,
    HOUR_MS,
    LOW,
    MID,
    PERCENTILES,
    Statistics,
)
from tracker.tracking.selectors import KITCHEN_STEPS, Spread

if TYPE_CHECKING:
    from tracker.orders.models import Order

T = TypeVar("T")


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
    def of_delivery(cls, event: DeliveryStatus) -> Trip:
        """From a courier's point on the road (``delivery_statuses``, a third of an
        ``orders_enriched`` record): a ride's prediction rests on the point, the distance
        left and the door; the restaurant's place and the pickup time do not enter it."""
        point = (event.lat, event.lon)
        return cls(
            event.restaurant_id, event.status, event.event_time, point,
            (event.destination_lat, event.destination_lon), event.distance_left_km, point,
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

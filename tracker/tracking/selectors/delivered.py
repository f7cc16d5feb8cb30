"""Aggregates over delivered orders: the kitchen, door and ride times the arrival
prediction learns from (:mod:`tracker.tracking.eta.stats`)."""

from __future__ import annotations

from dataclasses import dataclass

from contract.events import LIFECYCLE, OrderStatus, status_time_field
from tracker.tracking.selectors.store import query

#: The kitchen steps, each measured to the moment the food leaves (OUT_FOR_DELIVERY).
KITCHEN_STEPS = LIFECYCLE[: LIFECYCLE.index(OrderStatus.OUT_FOR_DELIVERY)]
_DELIVERED_BETWEEN = (
    f"status = '{OrderStatus.DELIVERED.value}' AND delivered_at > %(since)s "
    "AND delivered_at <= %(until)s"
)


@dataclass(frozen=True)
class Spread:
    """Percentiles of one measure, keyed by percentile (e.g. {10: .., 50: .., 90: ..})."""

    samples: int
    values: dict[int, float]


@dataclass(frozen=True)
class KitchenTimes:
    """Delivered orders' kitchen and door times, per restaurant (``restaurant_id`` None:
    every restaurant together) or per local hour of placement (``hour``). ``to_pickup
    [status]``: seconds from entering a kitchen step to the food leaving, measured end to
    end (so a kitchen that is slow at every step shows it in one span); ``door``: seconds
    from arriving at the door to delivered."""

    restaurant_id: int | None
    to_pickup: dict[str, Spread]
    door: Spread
    hour: int | None = None


def kitchen_times(
    since_ms: int,
    until_ms: int,
    percentiles: tuple[int, ...],
    *,
    by_restaurant: bool,
    hour_offset_ms: int | None = None,
) -> list[KitchenTimes]:
    """Percentiles of the kitchen spans of the orders delivered in (since, until]; also by
    local hour of placement when ``hour_offset_ms`` (the zone's UTC offset) is given."""
    spans = {
        s.value: f"(out_for_delivery_at - {status_time_field(s)}) / 1000" for s in KITCHEN_STEPS
    }
    spans["door"] = "(delivered_at - arriving_at_door_at) / 1000"
    aggs = [
        f"PERCENTILE({expr}, {int(p)}) AS {name.lower()}_p{int(p)}"
        for name, expr in spans.items()
        for p in percentiles
    ]
    present = " AND ".join(f"{status_time_field(s)} > 0" for s in LIFECYCLE)
    keys = ["restaurant_id"] if by_restaurant else []
    if hour_offset_ms is not None:
        keys.append(
            f"FLOOR(MOD({status_time_field(LIFECYCLE[0])} + {int(hour_offset_ms)}, 86400000) "
            "/ 3600000)"
        )
    columns = "".join(f"{key} AS k{i}, " for i, key in enumerate(keys))
    rows = query(
        f"SELECT {columns}COUNT(*) AS orders, {', '.join(aggs)} FROM orders_enriched "
        f"WHERE {_DELIVERED_BETWEEN} AND {present} "
        + (f"GROUP BY {', '.join(keys)} LIMIT 100000" if keys else ""),
        {"since": int(since_ms), "until": int(until_ms)},
    )
    out = []
    for row in rows:
        n = int(row["orders"])
        if n == 0:
            continue
        spread = {
            name: Spread(n, {int(p): float(row[f"{name.lower()}_p{int(p)}"]) for p in percentiles})
            for name in spans
        }
        door = spread.pop("door")
        rid = int(row["k0"]) if by_restaurant else None
        hour = int(float(row[f"k{len(keys) - 1}"])) if hour_offset_ms is not None else None
        out.append(KitchenTimes(rid, spread, door, hour))
    return out


def ride_speeds(
    since_ms: int,
    until_ms: int,
    percentiles: tuple[int, ...],
    *,
    hour_offset_ms: int | None = None,
    min_km: float = 0.5,
) -> dict[int | None, Spread]:
    """Percentiles of courier speed (km/h over the straight line from restaurant to door,
    from leaving to arriving at the door) of the rides delivered in (since, until] longer
    than ``min_km``: by local hour of day when ``hour_offset_ms`` (the zone's UTC offset)
    is given, else one entry keyed None."""
    metres = (
        "ST_Distance(ST_Point(restaurant_lon, restaurant_lat, 1), "
        "ST_Point(delivery_lon, delivery_lat, 1))"
    )
    speed = f"{metres} * 3600 / (arriving_at_door_at - out_for_delivery_at)"  # m/ms -> km/h
    aggs = ", ".join(f"PERCENTILE({speed}, {int(p)}) AS p{int(p)}" for p in percentiles)
    where = (
        f"{_DELIVERED_BETWEEN} AND out_for_delivery_at > 0 "
        f"AND arriving_at_door_at > out_for_delivery_at AND {metres} > {float(min_km) * 1000}"
    )
    params = {"since": int(since_ms), "until": int(until_ms)}
    if hour_offset_ms is None:
        rows = query(f"SELECT COUNT(*) AS rides, {aggs} FROM orders_enriched WHERE {where}", params)
        keys = [None for _ in rows]
    else:
        hour = f"FLOOR(MOD(out_for_delivery_at + {int(hour_offset_ms)}, 86400000) / 3600000)"
        rows = query(
            f"SELECT {hour} AS hour, COUNT(*) AS rides, {aggs} FROM orders_enriched "
            f"WHERE {where} GROUP BY {hour} LIMIT 24",
            params,
        )
        keys = [int(float(r["hour"])) for r in rows]
    return {
        key: Spread(int(r["rides"]), {int(p): float(r[f"p{int(p)}"]) for p in percentiles})
        for key, r in zip(keys, rows, strict=True)
        if int(r["rides"]) > 0
    }


def recently_delivered(since_ms: int, until_ms: int, limit: int) -> list[int]:
    """Ids of the last ``limit`` orders delivered after ``since_ms`` and at or before
    ``until_ms``, newest first."""
    rows = query(
        "SELECT order_id FROM orders_enriched WHERE status = %(status)s "
        "AND delivered_at > %(since)s AND delivered_at <= %(until)s "
        f"ORDER BY delivered_at DESC LIMIT {max(1, min(int(limit), 1000))}",
        {"status": OrderStatus.DELIVERED.value, "since": max(0, int(since_ms)),
         "until": int(until_ms)},
    )  # fmt: skip
    return [int(r["order_id"]) for r in rows]

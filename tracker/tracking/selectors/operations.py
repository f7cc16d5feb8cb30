"""Aggregate reads for operators and restaurants: time in status, stuck orders, the
statistics behind the arrival prediction, the restaurant dashboard and sales series.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from contract.events import (
    LIFECYCLE,
    OrderStatus,
    status_rank,
    status_time_field,
)
from tracker.tracking.selectors.store import _TERMINAL_SQL, _status, query, typed_row

# ---------------------------------------------------------------------- operations


@dataclass(frozen=True)
class StatusPercentiles:
    """Seconds the current not-delivered orders have spent in their status so far."""

    status: str
    orders: int
    min: float
    p50: float
    avg: float
    p75: float
    p90: float
    p99: float
    max: float


def time_in_status_percentiles(
    *, restaurant_id: int | None = None, as_of_ms: int | None = None
) -> list[StatusPercentiles]:
    """Per status, for orders not delivered (nor cancelled): min, p50, avg, p75, p90, p99, max.

    ``as_of_ms`` replaces Pinot's ``now()`` (tests and replays); times are seconds.
    """
    now = "now()" if as_of_ms is None else str(int(as_of_ms))
    age = f"({now} - status_time) / 1000"
    where = f"status NOT IN ({_TERMINAL_SQL})"
    params: dict[str, Any] = {}
    if restaurant_id is not None:
        where += " AND restaurant_id = %(restaurant_id)s"
        params["restaurant_id"] = int(restaurant_id)
    rows = query(
        f"SELECT status, COUNT(*) AS orders, MIN({age}) AS min_s, "
        f"PERCENTILE({age}, 50) AS p50, AVG({age}) AS avg_s, PERCENTILE({age}, 75) AS p75, "
        f"PERCENTILE({age}, 90) AS p90, PERCENTILE({age}, 99) AS p99, MAX({age}) AS max_s "
        f"FROM orders_enriched WHERE {where} GROUP BY status LIMIT 100",
        params,
    )
    out = [typed_row(StatusPercentiles, r, min="min_s", avg="avg_s", max="max_s") for r in rows]
    return sorted(out, key=lambda p: status_rank(p.status))


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


@dataclass(frozen=True)
class StuckOrder:
    """An order that has stayed in its status longer than the operator's threshold."""

    order_id: int
    customer_id: int
    restaurant_id: int
    status: str
    status_time: int
    seconds_in_status: float
    total: float


def stuck_orders(
    older_than_ms: int,
    *,
    status: str | None = None,
    restaurant_id: int | None = None,
    limit: int = 50,
) -> list[StuckOrder]:
    """Orders in ``status`` (any unfinished status when None) for more than ``older_than_ms``.

    Longest-waiting first.
    """
    where = ["(now() - status_time) > %(older_than)s"]
    params: dict[str, Any] = {"older_than": int(older_than_ms)}
    if status is not None:
        where.append("status = %(status)s")
        params["status"] = _status(status)
    else:
        where.append(f"status NOT IN ({_TERMINAL_SQL})")
    if restaurant_id is not None:
        where.append("restaurant_id = %(restaurant_id)s")
        params["restaurant_id"] = int(restaurant_id)
    rows = query(
        "SELECT order_id, customer_id, restaurant_id, status, status_time, total, "
        "(now() - status_time) / 1000 AS seconds_in_status FROM orders_enriched "
        f"WHERE {' AND '.join(where)} ORDER BY status_time, order_id "
        f"LIMIT {max(1, min(int(limit), 10_000))}",
        params,
    )
    return [typed_row(StuckOrder, r) for r in rows]


# ---------------------------------------------------------------------- dashboard

#: Dashboard windows: name -> (ISO-8601 duration, twice that duration).
WINDOWS = {"1h": ("PT1H", "PT2H"), "24h": ("PT24H", "PT48H"), "7d": ("P7D", "P14D")}


@dataclass(frozen=True)
class Dish:
    """A dish's quantity sold and the orders it was in, for a dashboard's top dishes."""

    product_name: str
    quantity: int
    orders: int


@dataclass(frozen=True)
class WindowStats:
    """One window (e.g. the last hour) and the period before it, for comparison."""

    orders: int
    sales: float
    previous_orders: int
    previous_sales: float
    top_dishes: list[Dish]


@dataclass(frozen=True)
class RestaurantDashboard:
    """One restaurant's figures for each window (1 h, 24 h, 7 d) against the period before."""

    restaurant_id: int
    restaurant_name: str
    windows: dict[str, WindowStats]


def _sum_when(condition: str, value: str) -> str:
    """``SUM(value) FILTER (WHERE condition)`` as Pinot 0.11 runs it beside a GROUP BY
    (its single-stage engine refuses FILTER clauses in grouped queries); 0 on no rows."""
    return f"SUM(CASE WHEN {condition} THEN {value} ELSE 0 END)"


def restaurant_dashboard(restaurant_id: int | None = None) -> list[RestaurantDashboard]:
    """Per restaurant: orders, sales and top-3 dishes for 1 h, 24 h, 7 d and the period before.

    Orders and sales come from orders_enriched (latest state, cancelled orders
    excluded, bucketed by ``created_at``); dishes from order_items_enriched
    (bucketed by the item's ``event_time``, ranked by quantity then name), leaving out
    the lines of orders cancelled since (by id: the item rows do not know the order's fate).
    """
    params: dict[str, Any] = {}
    scope = ""
    if restaurant_id is not None:
        scope = " AND restaurant_id = %(restaurant_id)s"
        params["restaurant_id"] = int(restaurant_id)
    aggs = []
    for name, (d, d2) in WINDOWS.items():
        cur = f"created_at > ago('{d}')"
        prev = f"created_at <= ago('{d}') AND created_at > ago('{d2}')"
        aggs += [
            f"{_sum_when(cur, '1')} AS orders_{name}",
            f"{_sum_when(cur, 'total')} AS sales_{name}",
            f"{_sum_when(prev, '1')} AS prev_orders_{name}",
            f"{_sum_when(prev, 'total')} AS prev_sales_{name}",
        ]
    totals = query(
        f"SELECT restaurant_id, restaurant_name, {', '.join(aggs)} FROM orders_enriched "
        f"WHERE created_at > ago('P14D') AND status <> '{OrderStatus.CANCELLED.value}'{scope} "
        "GROUP BY restaurant_id, restaurant_name ORDER BY restaurant_id LIMIT 100000",
        params,
    )
    dish_aggs = []
    for name, (d, _) in WINDOWS.items():
        cur = f"event_time > ago('{d}')"
        # DISTINCTCOUNT counts the placeholder 0 of the rows outside the window (order ids
        # are >= 1) as one more order: ``outside_<name>`` is 1 when there were such rows.
        dish_aggs += [
            f"{_sum_when(cur, 'quantity')} AS qty_{name}",
            f"DISTINCTCOUNT(CASE WHEN {cur} THEN order_id ELSE 0 END) AS orders_{name}",
            f"MAX(CASE WHEN {cur} THEN 0 ELSE 1 END) AS outside_{name}",
        ]
    cancelled = _cancelled_order_ids(scope, params)
    not_cancelled = f" AND order_id NOT IN ({', '.join(map(str, cancelled))})" if cancelled else ""
    dishes = query(
        f"SELECT restaurant_id, product_name, {', '.join(dish_aggs)} FROM order_items_enriched "
        f"WHERE event_time > ago('P7D'){scope}{not_cancelled} "
        "GROUP BY restaurant_id, product_name "
        "LIMIT 100000",
        params,
    )
    top: dict[tuple[int, str], list[Dish]] = defaultdict(list)
    for row in dishes:
        for name in WINDOWS:
            qty = int(row[f"qty_{name}"])
            if qty > 0:
                top[(int(row["restaurant_id"]), name)].append(
                    Dish(
                        row["product_name"],
                        qty,
                        int(row[f"orders_{name}"]) - int(row[f"outside_{name}"]),
                    )
                )
    by_restaurant: dict[int, RestaurantDashboard] = {}
    for row in totals:
        rid = int(row["restaurant_id"])
        windows = {
            name: WindowStats(
                orders=int(row[f"orders_{name}"]),
                sales=round(float(row[f"sales_{name}"]), 2),
                previous_orders=int(row[f"prev_orders_{name}"]),
                previous_sales=round(float(row[f"prev_sales_{name}"]), 2),
                top_dishes=sorted(top[(rid, name)], key=lambda d: (-d.quantity, d.product_name))[
                    :3
                ],
            )
            for name in WINDOWS
        }
        by_restaurant[rid] = RestaurantDashboard(rid, row["restaurant_name"], windows)
    return [by_restaurant[k] for k in sorted(by_restaurant)]


#: Cancelled orders the dish ranking leaves out by id (a week of a busy city's cancels).
MAX_EXCLUDED_CANCELLED = 20_000


def _cancelled_order_ids(scope: str, params: dict[str, Any]) -> list[int]:
    """Ids of the orders cancelled among those placed in the last 7 days (newest first).

    Pinot's single-stage engine has no join, and the item rows do not know their
    order's fate, so the dish query leaves these ids out by name.
    """
    rows = query(
        "SELECT order_id FROM orders_enriched "
        f"WHERE created_at > ago('P7D') AND status = '{OrderStatus.CANCELLED.value}'{scope} "
        f"ORDER BY created_at DESC LIMIT {MAX_EXCLUDED_CANCELLED}",
        params,
    )
    return [int(r["order_id"]) for r in rows]


def _now_ms() -> int:
    return int(time.time() * 1000)


#: Chart buckets per window: (count, bucket length in ms).
SERIES_BUCKETS = {"1h": (12, 300_000), "24h": (24, 3_600_000), "7d": (28, 21_600_000)}


@dataclass(frozen=True)
class SalesBucket:
    """One bucket of the chart: its start, and the same offset in the period before."""

    start: int
    orders: int
    sales: float
    previous_orders: int
    previous_sales: float


def restaurant_sales_series(
    restaurant_id: int | None, window: str, *, as_of_ms: int | None = None
) -> list[SalesBucket]:
    """Orders and sales over ``window`` (1h, 24h, 7d) in equal buckets, oldest first, each
    with the matching bucket of the period before; cancelled orders excluded.

    ``restaurant_id`` None: every restaurant (operators). The buckets end at ``as_of_ms``
    (default now), so the last one is the most recent ``step``.
    """
    count, step = SERIES_BUCKETS[window]
    end = _now_ms() if as_of_ms is None else int(as_of_ms)
    start = end - 2 * count * step
    params: dict[str, Any] = {}
    scope = ""
    if restaurant_id is not None:
        scope = " AND restaurant_id = %(restaurant_id)s"
        params["restaurant_id"] = int(restaurant_id)
    bucket = f"FLOOR((created_at - {start}) / {step})"
    rows = query(
        f"SELECT {bucket} AS bucket, COUNT(*) AS orders, SUM(total) AS sales "
        f"FROM orders_enriched WHERE created_at > {start} AND created_at <= {end} "
        f"AND status <> '{OrderStatus.CANCELLED.value}'{scope} "
        f"GROUP BY {bucket} ORDER BY {bucket} LIMIT {2 * count + 1}",
        params,
    )
    by_bucket = {min(int(float(r["bucket"])), 2 * count - 1): r for r in rows}
    out = []
    for i in range(count):
        prev, cur = by_bucket.get(i), by_bucket.get(count + i)
        out.append(
            SalesBucket(
                start=start + (count + i) * step,
                orders=int(cur["orders"]) if cur else 0,
                sales=round(float(cur["sales"]), 2) if cur else 0.0,
                previous_orders=int(prev["orders"]) if prev else 0,
                previous_sales=round(float(prev["sales"]), 2) if prev else 0.0,
            )
        )
    return out

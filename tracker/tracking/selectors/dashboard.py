"""The restaurant dashboard and its sales series: orders, sales and top dishes over
recent windows, each against the period before."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from contract.events import OrderStatus
from tracker.tracking.selectors.store import query

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

"""Aggregate reads for operators and restaurant staff on the orders still under way: time
in status and stuck orders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.events import status_rank
from tracker.tracking.selectors.store import _TERMINAL_SQL, _status, query, typed_row


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

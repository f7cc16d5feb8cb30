"""Every tracking read, as a named function with Pinot SQL, through pinotdb.

The API, the push layer and the dashboards call these functions and nothing
else, so each query is written (and contract-tested) once, against the same
tables in embedded mode (the local Pinot server) and in production (Pinot).

Conventions:

* parameters go through pinotdb's ``%(name)s`` substitution (it quotes strings);
  integers are coerced with ``int()`` first so nothing else reaches the SQL;
* every selection has an explicit LIMIT (Pinot silently returns 10 rows without one);
* nullable event fields are stored with the schema's ``defaultNullValue``
  (0 for times and ids, -1 for distance/ETA); they are turned back into None here;
* any failure to get an answer raises :class:`TrackingUnavailable` (API: 503).

Settings: ``PINOT_BROKER_URL`` (default ``http://127.0.0.1:8099``, the local server
in embedded mode) and ``PINOT_QUERY_TIMEOUT_S`` (default 5).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import types
import typing
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import pinotdb
from pinotdb import exceptions as pinot_errors

from contract.conf import env_float, env_str
from contract.events import (
    IN_TRANSIT_STATUSES,
    LIFECYCLE,
    TERMINAL_STATUSES,
    OrderEnriched,
    OrderStatus,
    status_rank,
    status_time_field,
)
from tracker.tracking.exceptions import TrackingUnavailable

DEFAULT_BROKER_URL = "http://127.0.0.1:8099"

#: The terminal statuses as a SQL list: ``status IN (...)`` is "finished".
_TERMINAL_SQL = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL_STATUSES))

# ---------------------------------------------------------------------- transport

#: The process's pinotdb connection and what it was opened for, shared by every thread: a
#: connection per thread would open a TCP connection (and a broker thread) for every
#: short-lived request thread. pinotdb locks cursor creation and its httpx client pools
#: keep-alive connections for concurrent queries.
_shared: tuple[tuple[str, float], Any] | None = None
_shared_lock = threading.Lock()

#: Idle keep-alive connections to the broker are kept this long: httpx's default of 5 s
#: turns every pause of a few seconds into a burst of new connections, and Pinot's broker
#: closes idle ones after 30 s.
KEEPALIVE_SECONDS = 20.0

#: Failures where the broker never answered: a kept-alive connection it had dropped, or a
#: new one its full accept queue reset. A query only reads, so it is sent once more.
_DROPPED = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def broker_url() -> str:
    return env_str("PINOT_BROKER_URL", DEFAULT_BROKER_URL)


def _connection() -> Any:
    """The shared connection, opened anew when the broker URL or timeout setting changed."""
    global _shared
    key = (broker_url(), env_float("PINOT_QUERY_TIMEOUT_S", 5.0))
    shared = _shared
    if shared is not None and shared[0] == key:
        return shared[1]
    with _shared_lock:
        if _shared is None or _shared[0] != key:
            url, timeout = key
            parts = urlsplit(url)
            session = httpx.Client(
                timeout=timeout,
                limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS),
            )
            _shared = (key, pinotdb.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or (443 if parts.scheme == "https" else 8099),
                path=parts.path if parts.path not in ("", "/") else "/query/sql",
                scheme=parts.scheme or "http",
                session=session,
            ))  # fmt: skip
        return _shared[1]


def _rows(conn: Any, sql: str, params: dict[str, Any] | None) -> list[dict[str, Any]]:
    cur = conn.cursor()
    cur.execute(sql, params or {})
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def query(sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one Pinot query; rows as dicts keyed by result column name."""
    global _shared
    conn = _connection()
    try:
        try:
            return _rows(conn, sql, params)
        except _DROPPED:
            return _rows(conn, sql, params)  # httpx dropped that connection: a new one
    except (pinot_errors.Error, httpx.HTTPError, OSError) as exc:
        with _shared_lock:  # reconnect next time (queries in flight keep the old one)
            if _shared is not None and _shared[1] is conn:
                _shared = None
        raise TrackingUnavailable(f"Pinot query failed: {exc}") from exc


def _status(value: str | None) -> str:
    return OrderStatus(value).value  # refuses unknown statuses early


# ---------------------------------------------------------------------- orders

#: The orders_enriched columns are the contract's OrderEnriched fields, nothing else.
_ORDER_HINTS = typing.get_type_hints(OrderEnriched)
_ORDER_FIELDS = [(f.name, _ORDER_HINTS[f.name]) for f in dataclasses.fields(OrderEnriched)]
ORDER_COLUMNS = ", ".join(name for name, _ in _ORDER_FIELDS)
#: What Pinot stores for a missing optional field (the schema's ``defaultNullValue``);
#: 0 for every optional field not named here.
NULL_VALUES: dict[str, float] = {"distance_left_km": -1.0, "eta_seconds": -1}


@dataclass(frozen=True)
class CourierPosition:
    """Where an order's courier last was, with the stream job's distance left and ETA."""

    order_id: int
    courier_id: int | None
    lat: float
    lon: float
    at: int
    status: str | None = None
    distance_left_km: float | None = None
    eta_seconds: int | None = None
    version: int | None = None


@dataclass(frozen=True)
class OrderState(OrderEnriched):
    """The current state of one order: its latest orders_enriched record, as the event
    contract defines it (``items`` stay the JSON objects Pinot returns)."""

    @property
    def updated_at(self) -> int:
        return self.event_time

    @property
    def is_active(self) -> bool:
        return self.status not in TERMINAL_STATUSES

    @property
    def status_times(self) -> dict[str, int]:
        """Status -> epoch millis it was entered (only statuses reached)."""
        times = {s.value: getattr(self, status_time_field(s)) for s in OrderStatus}
        return {status: at for status, at in times.items() if at is not None}

    @property
    def courier(self) -> CourierPosition | None:
        if self.location_time is None:
            return None
        return CourierPosition(
            self.order_id, self.courier_id, self.courier_lat or 0.0, self.courier_lon or 0.0,
            self.location_time,
        )  # fmt: skip


def _order(row: dict[str, Any]) -> OrderState:
    values: dict[str, Any] = {}
    for name, annotation in _ORDER_FIELDS:
        value = row[name]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            if value is None or value == NULL_VALUES.get(name, 0):
                values[name] = None
                continue
            (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        if annotation in (int, float):
            value = annotation(value)
        values[name] = value
    items = values["items"]
    if isinstance(items, str):  # a Pinot broker may answer a JSON column as text
        items = json.loads(items)
    values["items"] = items if isinstance(items, list) else []
    return OrderState(**values)


def list_orders(
    *,
    customer_id: int | None = None,
    courier_id: int | None = None,
    restaurant_ids: list[int] | None = None,
    status: str | None = None,
    state: Literal["active", "past"] | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[OrderState]:
    """Orders, latest state, newest first: a customer's, a courier's, some restaurants'
    (or every order when no scope is given, for operators); filter by status or
    active/past; paginate with limit/offset."""
    limit, offset = max(0, min(int(limit), 1000)), max(0, int(offset))
    where: list[str] = []
    params: dict[str, Any] = {}
    if customer_id is not None:
        where.append("customer_id = %(customer_id)s")
        params["customer_id"] = int(customer_id)
    if courier_id is not None:
        where.append("courier_id = %(courier_id)s")
        params["courier_id"] = int(courier_id)
    if restaurant_ids is not None:
        if not restaurant_ids:
            return []
        where.append(f"restaurant_id IN ({', '.join(str(int(r)) for r in restaurant_ids)})")
    if status is not None:
        where.append("status = %(status)s")
        params["status"] = _status(status)
    if state == "active":
        where.append(f"status NOT IN ({_TERMINAL_SQL})")
    elif state == "past":
        where.append(f"status IN ({_TERMINAL_SQL})")
    elif state is not None:
        raise ValueError(f"state must be 'active', 'past' or None, got {state!r}")
    rows = query(
        f"SELECT {ORDER_COLUMNS} FROM orders_enriched"
        + (f" WHERE {' AND '.join(where)}" if where else "")
        + f" ORDER BY created_at DESC, order_id DESC LIMIT {limit} OFFSET {offset}",
        params,
    )
    return [_order(r) for r in rows]


def order_state(order_id: int) -> OrderState | None:
    """One order's current state (None when Pinot has not seen it)."""
    rows = query(
        f"SELECT {ORDER_COLUMNS} FROM orders_enriched WHERE order_id = %(order_id)s LIMIT 1",
        {"order_id": int(order_id)},
    )
    return _order(rows[0]) if rows else None


@dataclass(frozen=True)
class StatusPeriod:
    """One step of an order's timeline: entered at, left at (None while current)."""

    status: str
    entered_at: int
    left_at: int | None
    duration_ms: int | None


def order_status_history(order_id: int) -> list[StatusPeriod]:
    """The statuses an order went through, oldest first, with time spent in each.

    Reads the upsert history (skipUpsert): the earliest ``status_time`` seen per
    status is when the order entered it. Duplicate or out-of-order versions from
    the at-least-once stream collapse into the same group. The durations of the
    finished steps are exact; the current step has no end (the caller adds "now").
    """
    rows = query(
        "SET skipUpsert = true; "
        "SELECT status, MIN(status_time) AS entered_at FROM orders_enriched "
        "WHERE order_id = %(order_id)s GROUP BY status ORDER BY MIN(status_time) LIMIT 20",
        {"order_id": int(order_id)},
    )
    return status_periods((r["status"], int(r["entered_at"])) for r in rows)


def status_periods(entered: Iterable[tuple[str, int]]) -> list[StatusPeriod]:
    """(status, entered at) pairs -> periods in lifecycle order, each ending where the next
    one starts. Equal times (a replayed or batched change) fall back to the lifecycle rank."""
    ordered = sorted(entered, key=lambda e: (e[1], status_rank(e[0])))
    return [
        StatusPeriod(status, at, nxt[1] if nxt else None, nxt[1] - at if nxt else None)
        for (status, at), nxt in zip(ordered, [*ordered[1:], None], strict=True)
    ]


# ---------------------------------------------------------------------- couriers

_POSITION_COLUMNS = (
    "order_id, courier_id, lat, lon, event_time, status, distance_left_km, eta_seconds, version"
)


def _position(row: dict[str, Any]) -> CourierPosition:
    return CourierPosition(
        order_id=int(row["order_id"]),
        courier_id=int(row["courier_id"]),
        lat=float(row["lat"]),
        lon=float(row["lon"]),
        at=int(row["event_time"]),
        status=row["status"],
        distance_left_km=float(row["distance_left_km"]),
        eta_seconds=int(row["eta_seconds"]),
        version=int(row["version"]),
    )


def courier_path(order_id: int, limit: int = 1000) -> list[CourierPosition]:
    """Every courier position of an order, oldest first (the trail on the map)."""
    return courier_paths([order_id], limit).get(int(order_id), [])


def courier_paths(order_ids: Iterable[int], limit: int = 1000) -> dict[int, list[CourierPosition]]:
    """The trails of several orders in one query: order id -> positions, oldest first
    (at most ``limit`` positions in all)."""
    ids = sorted({int(o) for o in order_ids})
    if not ids:
        return {}
    rows = query(
        f"SET skipUpsert = true; SELECT {_POSITION_COLUMNS} FROM delivery_statuses "
        f"WHERE order_id IN ({', '.join(map(str, ids))}) ORDER BY order_id, version, event_time "
        f"LIMIT {max(1, min(int(limit), 100_000))}"
    )
    seen, out = set(), defaultdict(list)
    for row in rows:  # at-least-once: the same version may be stored twice
        key = (row["order_id"], row["version"])
        if key not in seen:
            seen.add(key)
            out[int(row["order_id"])].append(_position(row))
    return dict(out)


def polygon_wkt(points: list[tuple[float, float]]) -> str:
    """WKT of a polygon from (lon, lat) points; closes the ring if needed."""
    if len(points) < 3:
        raise ValueError("a polygon needs at least 3 points")
    ring = list(points) + ([points[0]] if tuple(points[0]) != tuple(points[-1]) else [])
    return "POLYGON((" + ", ".join(f"{float(x)!r} {float(y)!r}" for x, y in ring) + "))"


def deliveries_in_area(
    polygon: str | list[tuple[float, float]], limit: int = 100
) -> list[CourierPosition]:
    """Orders in transit whose latest courier position lies inside ``polygon``.

    ``polygon`` is WKT or a list of (lon, lat) points. Newest positions first.
    """
    wkt = polygon if isinstance(polygon, str) else polygon_wkt(polygon)
    statuses = ", ".join(f"'{s.value}'" for s in sorted(IN_TRANSIT_STATUSES))
    rows = query(
        f"SELECT {_POSITION_COLUMNS} FROM delivery_statuses "
        # The column itself as the argument, so Pinot's H3 index on `location` serves the
        # filter (toGeometry(location) would be evaluated row by row); a geography literal,
        # as the column is one (stPoint(lon, lat, 1)).
        "WHERE ST_Contains(ST_GeogFromText(%(wkt)s), location) = 1 "
        f"AND status IN ({statuses}) "
        f"ORDER BY event_time DESC, order_id LIMIT {max(1, min(int(limit), 10_000))}",
        {"wkt": wkt},
    )
    return [_position(r) for r in rows]


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
    out = [
        StatusPercentiles(
            status=r["status"],
            orders=int(r["orders"]),
            min=float(r["min_s"]),
            p50=float(r["p50"]),
            avg=float(r["avg_s"]),
            p75=float(r["p75"]),
            p90=float(r["p90"]),
            p99=float(r["p99"]),
            max=float(r["max_s"]),
        )
        for r in rows
    ]
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


def recently_delivered(until_ms: int, limit: int) -> list[int]:
    """Ids of the last ``limit`` orders delivered at or before ``until_ms``, newest first."""
    rows = query(
        "SELECT order_id FROM orders_enriched WHERE status = %(status)s "
        "AND delivered_at > 0 AND delivered_at <= %(until)s "
        f"ORDER BY delivered_at DESC LIMIT {max(1, min(int(limit), 1000))}",
        {"status": OrderStatus.DELIVERED.value, "until": int(until_ms)},
    )
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
    return [
        StuckOrder(
            order_id=int(r["order_id"]),
            customer_id=int(r["customer_id"]),
            restaurant_id=int(r["restaurant_id"]),
            status=r["status"],
            status_time=int(r["status_time"]),
            seconds_in_status=float(r["seconds_in_status"]),
            total=float(r["total"]),
        )
        for r in rows
    ]


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
            f"COUNT(*) FILTER (WHERE {cur}) AS orders_{name}",
            f"SUM(total) FILTER (WHERE {cur}) AS sales_{name}",
            f"COUNT(*) FILTER (WHERE {prev}) AS prev_orders_{name}",
            f"SUM(total) FILTER (WHERE {prev}) AS prev_sales_{name}",
        ]
    totals = query(
        f"SELECT restaurant_id, restaurant_name, {', '.join(aggs)} FROM orders_enriched "
        f"WHERE created_at > ago('P14D') AND status <> '{OrderStatus.CANCELLED.value}'{scope} "
        "GROUP BY restaurant_id, restaurant_name ORDER BY restaurant_id LIMIT 100000",
        params,
    )
    dish_aggs = []
    for name, (d, _) in WINDOWS.items():
        dish_aggs += [
            f"SUM(quantity) FILTER (WHERE event_time > ago('{d}')) AS qty_{name}",
            f"DISTINCTCOUNT(order_id) FILTER (WHERE event_time > ago('{d}')) AS orders_{name}",
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
                    Dish(row["product_name"], qty, int(row[f"orders_{name}"]))
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

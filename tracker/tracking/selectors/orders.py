"""Reads of orders as customers, couriers and restaurants follow them: one order's state and
status history, the lists each role sees, courier trails and deliveries in an area.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from contract.events import (
    IN_TRANSIT_STATUSES,
    TERMINAL_STATUSES,
    OrderEnriched,
    OrderStatus,
    status_rank,
    status_time_field,
)
from tracker.tracking.selectors.store import _TERMINAL_SQL, _status, query, typed_row

# ---------------------------------------------------------------------- orders

#: The orders_enriched columns are the contract's OrderEnriched fields, nothing else.
ORDER_COLUMNS = ", ".join(f.name for f in dataclasses.fields(OrderEnriched))
#: What Pinot stores for a missing optional field (the schema's ``defaultNullValue``);
#: 0 for every optional field not named here.
NULL_VALUES: dict[str, float] = {"distance_left_km": -1.0}


@dataclass(frozen=True)
class CourierPosition:
    """Where an order's courier was, with the stream job's distance left to the door."""

    order_id: int
    courier_id: int | None
    lat: float
    lon: float
    at: int
    status: str | None = None
    distance_left_km: float | None = None
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
    items = row["items"]
    if isinstance(items, str):  # a Pinot broker may answer a JSON column as text
        items = json.loads(items)
    row = {**row, "items": items if isinstance(items, list) else []}
    return typed_row(OrderState, row, nulls=NULL_VALUES)


def list_orders(
    *,
    customer_id: int | None = None,
    courier_id: int | None = None,
    restaurant_ids: list[int] | None = None,
    order_ids: list[int] | None = None,
    status: str | None = None,
    state: Literal["active", "past"] | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[OrderState]:
    """Orders, latest state, newest first: a customer's, a courier's, some restaurants',
    some orders by id (or every order when no scope is given, for operators); filter by
    status or active/past; paginate with limit/offset."""
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
    if order_ids is not None:
        ids, count = _id_list(order_ids)
        if not count:
            return []
        where.append(f"order_id IN ({ids})")
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


def _id_list(order_ids: Iterable[int]) -> tuple[str, int]:
    """Order ids as an SQL list (integers, so nothing to escape), and how many."""
    ids = sorted({int(i) for i in order_ids})
    return ", ".join(map(str, ids)), len(ids)


def order_states(order_ids: Iterable[int]) -> dict[int, OrderState]:
    """Several orders' current states by id, in one query (absent: Pinot has not seen it)."""
    ids, count = _id_list(order_ids)
    if not count:
        return {}
    rows = query(
        f"SELECT {ORDER_COLUMNS} FROM orders_enriched WHERE order_id IN ({ids}) LIMIT {count}"
    )
    return {state.order_id: state for state in map(_order, rows)}


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

_POSITION_COLUMNS = "order_id, courier_id, lat, lon, event_time, status, distance_left_km, version"


def _position(row: dict[str, Any]) -> CourierPosition:
    return typed_row(CourierPosition, row, at="event_time")


def courier_path(order_id: int, limit: int = 1000) -> list[CourierPosition]:
    """Every courier position of an order, oldest first (the trail on the map)."""
    return courier_paths([order_id], limit).get(int(order_id), [])


def courier_paths(order_ids: Iterable[int], limit: int = 1000) -> dict[int, list[CourierPosition]]:
    """The trails of several orders in one query: order id -> positions, oldest first
    (at most ``limit`` positions in all)."""
    ids, count = _id_list(order_ids)
    if not count:
        return {}
    rows = query(
        f"SET skipUpsert = true; SELECT {_POSITION_COLUMNS} FROM delivery_statuses "
        f"WHERE order_id IN ({ids}) ORDER BY order_id, version, event_time "
        f"LIMIT {max(1, min(int(limit), 100_000))}"
    )
    seen, out = set(), defaultdict(list)
    # One entry per point, by the time it was taken: at-least-once delivery may store a
    # version twice, and a status change on the road (ARRIVING_AT_DOOR) writes the latest
    # point again under its own version.
    for row in rows:
        key = (row["order_id"], row["event_time"])
        if key not in seen:
            seen.add(key)
            out[int(row["order_id"])].append(_position(row))
    return dict(out)


def thinned_trails(
    order_ids: Iterable[int], every_ms: int, per_query: int = 100
) -> dict[int, list[tuple[float, float]]]:
    """Several orders' courier trails as (lat, lon), oldest first, thinned to the last point
    of every ``every_ms`` slot: what a ride's distance along the streets needs.

    A ride sends a point every second or two, so a thousand past rides are over a million
    points: Pinot groups them into slots, and the orders are asked ``per_query`` at a time,
    so no answer holds more than a few thousand rows (a web worker that parsed them all at
    once grew by some 100 MiB at each statistics load)."""
    ids = sorted({int(i) for i in order_ids})
    slot = f"FLOOR(event_time / {int(every_ms)})"
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for start in range(0, len(ids), per_query):
        rows = query(
            "SET skipUpsert = true; "
            f"SELECT order_id, {slot}, LASTWITHTIME(lat, event_time, 'DOUBLE') AS lat, "
            f"LASTWITHTIME(lon, event_time, 'DOUBLE') AS lon FROM delivery_statuses "
            f"WHERE order_id IN ({', '.join(map(str, ids[start : start + per_query]))}) "
            f"GROUP BY order_id, {slot} ORDER BY order_id, {slot} LIMIT 100000"
        )
        for row in rows:
            out[int(row["order_id"])].append((float(row["lat"]), float(row["lon"])))
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

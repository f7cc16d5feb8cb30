"""The transport every selector shares: one pinotdb connection per process, and ``query``.

Any failure to get an answer raises :class:`TrackingUnavailable` (API: 503); a query
whose kept-alive connection the broker had dropped is sent once more (it only reads).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pinotdb
from pinotdb import exceptions as pinot_errors

from contract.events import (
    TERMINAL_STATUSES,
    OrderStatus,
)
from runtime.conf import env_float, env_str
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


def pinot_timeout_ms(client_timeout_s: float) -> int:
    """Pinot's own limit for a query, a second below the client's: a slow query ends with
    Pinot's timeout exception (a 503 that says so), and its servers stop working on it,
    instead of the client dropping a connection Pinot goes on answering."""
    return max(100, int(client_timeout_s * 1000) - 1000)


def _connection() -> Any:
    """The shared connection, opened anew when the broker URL or timeout setting changed.

    Every query compares the two settings as they stand in the environment (tests and
    operators change them at run time) and parses them only when they changed."""
    global _shared
    key = (os.environ.get("PINOT_BROKER_URL", ""), os.environ.get("PINOT_QUERY_TIMEOUT_S", ""))
    shared = _shared
    if shared is not None and shared[0] == key:
        return shared[1]
    with _shared_lock:
        if _shared is None or _shared[0] != key:
            url, timeout = broker_url(), env_float("PINOT_QUERY_TIMEOUT_S", 5.0)
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
                query_options=f"timeoutMs={pinot_timeout_ms(timeout)}",
            ))  # fmt: skip
        return _shared[1]


def query(sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one Pinot query; rows as dicts keyed by result column name.

    An answer from no server is no answer: while a restarted server re-reads Kafka, the
    broker routes to no server and answers with no rows and no exception, which would
    read as "no such order" (tests/integration/pinot/test_real_pinot.py)."""
    global _shared
    conn = _connection()
    try:
        cur = conn.cursor()
        try:
            cur.execute(sql, params or {})
        except _DROPPED:  # httpx dropped that kept-alive connection: once more, on a new one
            cur = conn.cursor()
            cur.execute(sql, params or {})
        if not cur.query_stats.get("numServersQueried"):
            raise pinot_errors.DatabaseError("no Pinot server holds the table's segments")
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    except (pinot_errors.Error, httpx.HTTPError, OSError) as exc:
        with _shared_lock:  # reconnect next time (queries in flight keep the old one)
            if _shared is not None and _shared[1] is conn:
                _shared = None
        raise TrackingUnavailable(f"Pinot query failed: {exc}") from exc


_Model = TypeVar("_Model")


@functools.cache
def _field_types(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, type, optional) of each field of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    out = []
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        optional = typing.get_origin(kind) in (typing.Union, types.UnionType)
        if optional:
            (kind,) = [a for a in typing.get_args(kind) if a is not type(None)]
        out.append((field.name, kind, optional))
    return out


def typed_row(
    cls: type[_Model],
    row: Mapping[str, Any],
    *,
    nulls: Mapping[str, Any] | None = None,
    **columns: str,
) -> _Model:
    """The read model ``cls`` (a dataclass) from one result row: each field from the column
    of its name (or the one ``columns`` names for it), as its declared int or float (a
    broker may answer an integer as a float). An optional field is None when the column
    is, or, with ``nulls``, when it holds the schema's ``defaultNullValue`` (``nulls``
    by field name, 0 for any other)."""
    values: dict[str, Any] = {}
    for name, kind, optional in _field_types(cls):
        value = row[columns.get(name, name)]
        if optional and (value is None or (nulls is not None and value == nulls.get(name, 0))):
            values[name] = None
        else:
            values[name] = kind(value) if kind in (int, float) else value
    return cls(**values)


def _status(value: str | None) -> str:
    return OrderStatus(value).value  # refuses unknown statuses early

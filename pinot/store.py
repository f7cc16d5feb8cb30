"""DuckDB storage with Pinot's upsert and dedup semantics.

Per upsert table there are two DuckDB tables: ``<table>`` holds the current row
per primary key (what Pinot returns by default) and ``<table>__history`` holds
every consumed record (what ``skipUpsert=true`` returns; Pinot keeps those rows
too, it only masks the superseded ones). A dedup table keeps the first record
per primary key. Offsets live in ``__offsets`` and are written in the same
transaction as the rows, so a restart of this process neither loses nor
double-applies records.

Upsert rule (Pinot FULL mode with a comparison column): a record replaces the
current row when its comparison value is greater than or equal to the current
one; on equal values the later offset wins. Within one batch the rows are
de-duplicated first, then the current rows they beat are deleted and the winners
inserted. A write never updates a row in place: DuckDB skips its automatic
checkpoint at a commit that updated rows while other transactions are open, and
queries are open beside nearly every write here. With in-place updates the
database never checkpointed while serving: its write-ahead log, and the memory
behind it, grew for as long as it ran (docs/performance.md). Two more things hold
checkpoints off for as long as they last: a result read only in part (its
transaction stays open, so every result here is read to the end), and a catalog
change committed while a query is open (so the macro is created once).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import shapely

from pinot.definitions import Column, TableDef

log = logging.getLogger(__name__)

_DUCK_TYPES = {
    "INT": "INTEGER",
    "LONG": "BIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "STRING": "VARCHAR",
    "JSON": "VARCHAR",
    "BOOLEAN": "BOOLEAN",
}
_ARROW_TYPES = {
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
}

#: How every connection is opened (see Store.__init__).
DUCKDB_CONFIG = {"enable_external_access": False, "lock_configuration": True}

#: Prepared statements a read cursor keeps (one per parameterised query text).
MAX_PREPARED_PER_CURSOR = 256

PERCENTILE_MACRO = """
CREATE OR REPLACE MACRO pinot_percentile(l, p) AS
  CASE WHEN l IS NULL OR len(l) = 0 THEN CAST('-inf' AS DOUBLE)
  ELSE list_sort(l)[LEAST(CAST(floor(len(l) * p / 100.0) AS BIGINT), len(l) - 1) + 1] END
"""


def history_table(name: str) -> str:
    return f"{name}__history"


def physical_columns(table: TableDef) -> list[tuple[str, str]]:
    """(DuckDB column, DuckDB type) in storage order; a point column becomes x and y."""
    out = []
    for col in table.columns:
        if col.name in table.points:
            out += [(f"{col.name}__x", "DOUBLE"), (f"{col.name}__y", "DOUBLE")]
        elif col.data_type == "BYTES":
            continue  # only point geometries are stored; validate() allows nothing else here
        else:
            out.append((col.name, _DUCK_TYPES[col.data_type]))
    return out


class RecordError(ValueError):
    """A consumed message cannot become a row (Pinot drops such records too).

    ``reason`` is the short, value-free cause the ingester counts skipped records by.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


#: What Pinot's integer columns hold.
_INT_RANGES = {"INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}

#: Errors of one record the store cannot hold (a value out of its column's range, a
#: conversion): the ingester skips such a record; any other error is the store's own.
RECORD_ERRORS: tuple[type[BaseException], ...] = (
    RecordError,
    UnicodeError,  # a lone surrogate ("\\ud800" is valid JSON) has no UTF-8 form
    pa.ArrowException,
    OverflowError,
    duckdb.ConversionException,
    duckdb.ConstraintException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    duckdb.TypeMismatchException,
)


def _convert(col: Column, value: Any) -> Any:
    if value is None:
        return col.default
    t = col.data_type
    if t in ("INT", "LONG"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{col.name}: not a number: {value!r}", f"{col.name}: not a number")
        low, high = _INT_RANGES[t]
        if not (isinstance(value, int) or math.isfinite(value)) or not low <= value <= high:
            raise RecordError(
                f"{col.name}: {value!r} does not fit {t}", f"{col.name}: does not fit {t}"
            )
        return int(value)
    if t in ("FLOAT", "DOUBLE"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{col.name}: not a number: {value!r}", f"{col.name}: not a number")
        try:
            return float(value)
        except OverflowError:
            raise RecordError(
                f"{col.name}: {value!r} does not fit {t}", f"{col.name}: does not fit {t}"
            ) from None
    if t == "JSON":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if t == "STRING":
        return value if isinstance(value, str) else json.dumps(value)
    if t == "BOOLEAN":
        return bool(value)
    raise RecordError(f"{col.name}: unsupported type {t}")


def to_row(table: TableDef, data: Any) -> list[Any]:
    """One decoded JSON message -> storage row (Pinot's defaults for missing fields)."""
    if not isinstance(data, dict):
        raise RecordError("message is not a JSON object")
    for key in (*table.primary_key, *([table.comparison_column] if table.upsert else [])):
        if data.get(key) is None:
            raise RecordError(f"{key}: primary key / comparison value is missing")
    row: list[Any] = []
    for col in table.columns:
        if col.name in table.points:
            xf, yf = table.points[col.name]
            x, y = data.get(xf), data.get(yf)
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
                raise RecordError(f"{col.name}: stPoint needs numeric {xf}, {yf}")
            row += [float(x), float(y)]
        elif col.data_type != "BYTES":
            row.append(_convert(col, data.get(col.name)))
    return row


def _st_contains(wkt: pa.Array, x: pa.Array, y: pa.Array) -> pa.Array:
    """Vectorised point-in-polygon (planar, like Pinot's ST_Contains on toGeometry)."""
    out = np.zeros(len(x), dtype=np.int32)
    wkts = wkt.to_pylist()
    xs = x.to_numpy(zero_copy_only=False)
    ys = y.to_numpy(zero_copy_only=False)
    for text in set(wkts):
        geom = shapely.from_wkt(text)
        shapely.prepare(geom)
        mask = np.array([w == text for w in wkts]) if len(set(wkts)) > 1 else slice(None)
        out[mask] = shapely.contains_xy(geom, xs[mask], ys[mask]).astype(np.int32)
    return pa.array(out)


@dataclass
class Batch:
    """Rows of one table consumed together, with the offsets they advance to."""

    table: TableDef
    rows: list[list[Any]]
    #: True for rows re-read after the topic was recreated (already seen before).
    replayed: list[bool]


class Store:
    """The DuckDB database: one writer (the ingester), many reader cursors."""

    def __init__(
        self, tables: dict[str, TableDef], path: str = ":memory:", memory_limit: str | None = None
    ) -> None:
        self.tables = tables
        self.path = path
        # Read-only and local whatever SQL arrives: no file system or network access
        # (read_csv, COPY ... TO, ATTACH, INSTALL/LOAD all fail), and the setting itself
        # cannot be switched back with SET. The database's own file is still used.
        # DuckDB's default memory limit is 80% of the machine; a file database spills
        # past ``memory_limit`` to disk instead of growing the process.
        config = {**DUCKDB_CONFIG, **({"memory_limit": memory_limit} if memory_limit else {})}
        self.conn = duckdb.connect(path, config=config)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._idle: list[duckdb.DuckDBPyConnection] = []  # read cursors not in use
        #: Per read cursor (by id): parameterised query text -> its prepared statement's
        #: name ("" when DuckDB could not prepare it).
        self._prepared: dict[int, dict[str, str]] = {}
        self._statement_ids = itertools.count()
        # Both once, not per cursor: every cursor of the database sees them, and a catalog
        # change beside an open query holds checkpoints off (see the module's note).
        self.conn.execute(PERCENTILE_MACRO)
        self.conn.create_function(
            "pinot_st_contains",
            _st_contains,
            ["VARCHAR", "DOUBLE", "DOUBLE"],
            "INTEGER",
            type="arrow",
        )
        for table in tables.values():
            cols = physical_columns(table)
            ddl = ", ".join(f'"{c}" {t}' for c, t in cols)
            if table.upsert or table.dedup:
                pk = ", ".join(f'"{c}"' for c in table.primary_key)
                self.conn.execute(
                    f'CREATE TABLE IF NOT EXISTS "{table.name}" ({ddl}, PRIMARY KEY ({pk}))'
                )
            else:
                self.conn.execute(f'CREATE TABLE IF NOT EXISTS "{table.name}" ({ddl})')
            if table.upsert:
                self.conn.execute(
                    f'CREATE TABLE IF NOT EXISTS "{history_table(table.name)}" ({ddl})'
                )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS __offsets (topic VARCHAR, part INTEGER, "
            "next_offset BIGINT, fingerprint VARCHAR, PRIMARY KEY (topic, part))"
        )

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread (DuckDB connections are not shared by threads)."""
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self.conn.cursor()
            self._local.cursor = cur
            with self._lock:
                self._cursors.append(cur)
        return cur

    def read(
        self, sql: str, prepared: tuple[str, tuple[Any, ...]] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one query on a cursor from the pool: as many cursors as queries run at once,
        not one per HTTP connection thread (a new cursor costs milliseconds to set up).

        ``prepared`` is the same query as a parameterised text and its values: each cursor
        prepares a text once and executes it after that, without planning it again.
        """
        with self._lock:
            cur = self._idle.pop() if self._idle else None
        if cur is None:
            cur = self.conn.cursor()
            with self._lock:
                self._cursors.append(cur)
        try:
            if prepared is None:
                return cur.execute(sql).fetchall()
            return self._execute_prepared(cur, sql, *prepared)
        finally:
            with self._lock:
                self._idle.append(cur)

    def _execute_prepared(
        self, cur: duckdb.DuckDBPyConnection, sql: str, text: str, params: tuple[Any, ...]
    ) -> list[tuple[Any, ...]]:
        names = self._prepared.setdefault(id(cur), {})
        name = names.get(text)
        if name is None:
            if len(names) >= MAX_PREPARED_PER_CURSOR:
                for old in names.values():
                    cur.execute(f"DEALLOCATE {old}")
                names.clear()
            name = f"__q{next(self._statement_ids)}"
            try:
                cur.execute(f"PREPARE {name} AS {text}")
            except duckdb.Error:  # not preparable as written: plain text, as before
                names[text] = ""
                return cur.execute(sql).fetchall()
            names[text] = name
        if not name:
            return cur.execute(sql).fetchall()
        return cur.execute(f"EXECUTE {name}({', '.join(map(repr, params))})").fetchall()

    def close(self) -> None:
        with self._lock:
            for cur in self._cursors:
                cur.close()
            self._cursors.clear()
            self._idle.clear()
        self.conn.close()

    # ------------------------------------------------------------------ offsets

    def load_offsets(self) -> dict[tuple[str, int], tuple[int, str | None]]:
        rows = self.conn.execute("SELECT topic, part, next_offset, fingerprint FROM __offsets")
        return {(t, p): (n, f) for t, p, n, f in rows.fetchall()}

    # ------------------------------------------------------------------ ingest

    def apply(
        self,
        batches: list[Batch],
        offsets: dict[tuple[str, int], tuple[int, str | None]],
    ) -> None:
        """Apply rows and advance offsets in one transaction."""
        cur = self.cursor()
        cur.execute("BEGIN TRANSACTION")
        try:
            for batch in batches:
                if batch.rows:
                    self._apply_batch(cur, batch)
            if offsets:
                # One statement each: executemany plans and runs one per partition, which
                # cost more than the rows themselves at the default load. Delete and insert,
                # not INSERT OR REPLACE: that is an in-place update (see the module's note).
                keys = ", ".join("(?, ?)" for _ in offsets)
                cur.execute(
                    f"DELETE FROM __offsets WHERE (topic, part) IN ({keys})",
                    [v for t, p in offsets for v in (t, p)],
                )
                values = ", ".join("(?, ?, ?, ?)" for _ in offsets)
                cur.execute(
                    f"INSERT INTO __offsets VALUES {values}",
                    [v for (t, p), (n, f) in offsets.items() for v in (t, p, n, f)],
                )
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def _apply_batch(self, cur: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        table = batch.table
        cols = physical_columns(table)
        names = [c for c, _ in cols]
        arrays = {
            name: pa.array([r[i] for r in batch.rows], type=_ARROW_TYPES[t])
            for i, (name, t) in enumerate(cols)
        }
        arrays["__seq"] = pa.array(range(len(batch.rows)), type=pa.int64())
        arrays["__replayed"] = pa.array(batch.replayed, type=pa.bool_())
        cur.register("__batch", pa.table(arrays))
        try:
            # Target columns named: a database file from an earlier schema may hold a column
            # the schema has since dropped (as Pinot keeps it); it gets NULL, like Pinot's default.
            col_list = ", ".join(f'"{c}"' for c in names)
            pk = ", ".join(f'"{c}"' for c in table.primary_key)
            if table.upsert:
                cmp_col = table.comparison_column
                winners = (
                    f"(SELECT * FROM __batch QUALIFY row_number() OVER (PARTITION BY {pk} "
                    f'ORDER BY "{cmp_col}" DESC, __seq DESC) = 1)'
                )
                on_key = " AND ".join(f't."{c}" = w."{c}"' for c in table.primary_key)
                # Current rows a winner beats go; a winner whose row stays (a greater
                # comparison value) then conflicts and is not inserted.
                cur.execute(
                    f'DELETE FROM "{table.name}" t USING {winners} w '
                    f'WHERE {on_key} AND w."{cmp_col}" >= t."{cmp_col}"'
                )
                cur.execute(
                    f'INSERT INTO "{table.name}" ({col_list}) SELECT {col_list} FROM {winners} '
                    f"ON CONFLICT DO NOTHING"
                )
                hist = history_table(table.name)
                if any(batch.replayed):
                    # Only after a topic was recreated: the anti-join scans the whole
                    # history (it has no index), which new records must not pay for.
                    join = " AND ".join(f'h."{c}" = b."{c}"' for c in (*table.primary_key, cmp_col))
                    b_cols = ", ".join(f'b."{c}"' for c in names)
                    cur.execute(
                        f'INSERT INTO "{hist}" ({col_list}) SELECT {b_cols} '
                        f"FROM __batch b WHERE NOT b.__replayed OR NOT EXISTS "
                        f'(SELECT 1 FROM "{hist}" h WHERE {join}) ORDER BY b.__seq'
                    )
                else:
                    cur.execute(
                        f'INSERT INTO "{hist}" ({col_list}) SELECT {col_list} '
                        f"FROM __batch ORDER BY __seq"
                    )
            elif table.dedup:
                cur.execute(
                    f'INSERT INTO "{table.name}" ({col_list}) SELECT {col_list} FROM __batch '
                    f"QUALIFY row_number() OVER (PARTITION BY {pk} ORDER BY __seq) = 1 "
                    f"ON CONFLICT DO NOTHING"
                )
            else:
                cur.execute(
                    f'INSERT INTO "{table.name}" ({col_list}) SELECT {col_list} FROM __batch'
                )
        finally:
            cur.unregister("__batch")

    def purge_older_than(self, cutoff_ms: int) -> None:
        """Retention: drop rows whose time column is older than ``cutoff_ms``."""
        cur = self.cursor()
        for table in self.tables.values():
            names = [table.name] + ([history_table(table.name)] if table.upsert else [])
            for name in names:
                cur.execute(f'DELETE FROM "{name}" WHERE "{table.time_column}" < ?', [cutoff_ms])

    def counts(self) -> dict[str, int]:
        cur = self.cursor()
        out = {}
        for table in self.tables.values():
            names = [table.name] + ([history_table(table.name)] if table.upsert else [])
            for name in names:
                # fetchall: an unfinished result keeps its transaction open (see the module).
                out[name] = cur.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
        return out

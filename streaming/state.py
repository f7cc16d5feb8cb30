"""Driver-side keyed state, made durable per micro-batch in the checkpoint directory.

Why not a Spark state store: on this 2-core machine every stateful Spark operator
(``transformWithStateInPandas``, ``applyInPandasWithState``) costs a shuffle, an
Arrow round trip to a Python worker and a state-store commit per micro-batch,
measured here at 0.6-0.9 s per micro-batch for ``applyInPandasWithState`` with
RocksDB changelog checkpointing (1.7-3 s for ``transformWithStateInPandas`` in the
spike), against ~0.2 s for this store. The join itself takes microseconds per event, so
the job keeps the state in the driver process and persists the *changed* orders
of each batch in SQLite next to Spark's offset log (a changelog: cost is
proportional to the batch, not to the state size).

Exactly-once against Spark's micro-batch protocol: the state table records the
last ``batch_id`` whose changes it holds. Spark re-runs an uncommitted batch with
the same id and offsets after a crash, so:

* crash before the state commit: the batch re-runs from the previous state and
  re-emits identical records (same (order id, version), same event ids);
* crash after the state commit but before Spark's commit: the re-run batch id is
  already applied, so it is skipped (its outputs were flushed before the commit).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


class DriverStateStore:
    """All orders' join state in memory, with a SQLite changelog for restarts."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS state (order_id INTEGER PRIMARY KEY, data TEXT NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER)")
        row = self._db.execute("SELECT v FROM meta WHERE k = 'batch_id'").fetchone()
        self.last_batch_id: int = row[0] if row else -1
        self.states: dict[int, dict[str, Any]] = {
            order_id: json.loads(data)
            for order_id, data in self._db.execute("SELECT order_id, data FROM state")
        }

    def commit(self, batch_id: int, changed: dict[int, dict[str, Any] | None]) -> None:
        """Persist ``changed`` (None = delete) as the state after ``batch_id``, then apply it."""
        db = self._db
        db.execute("BEGIN")
        try:
            upserts = [(k, json.dumps(v, separators=(",", ":"))) for k, v in changed.items() if v]
            deletes = [(k,) for k, v in changed.items() if v is None]
            if upserts:
                db.executemany(
                    "INSERT OR REPLACE INTO state (order_id, data) VALUES (?, ?)", upserts
                )
            if deletes:
                db.executemany("DELETE FROM state WHERE order_id = ?", deletes)
            db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('batch_id', ?)", (batch_id,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        for order_id, value in changed.items():
            if value is None:
                self.states.pop(order_id, None)
            else:
                self.states[order_id] = value
        self.last_batch_id = batch_id

    def close(self) -> None:
        self._db.close()

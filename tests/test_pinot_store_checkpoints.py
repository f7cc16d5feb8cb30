"""The stand-in's database keeps its write-ahead log bounded while queries run beside
every write (a long run grew it 26 MB a minute, spilling to temporary files)."""

from __future__ import annotations

import threading
from pathlib import Path

from pinot import store as store_module
from pinot.definitions import load_tables
from pinot.store import Batch, Store, to_row

MB = 1024 * 1024


def upserts(store: Store, first_version: int, orders: int = 300) -> Batch:
    table = store.tables["orders_enriched"]
    rows = [
        to_row(
            table,
            {
                "order_id": order_id,
                "version": first_version + order_id,
                "status": "OUT_FOR_DELIVERY",
                "customer_name": f"customer {order_id} " + "x" * 400,
                "status_time": 1_795_000_000_000 + first_version,
            },
        )
        for order_id in range(orders)
    ]
    return Batch(table, rows, [False] * len(rows))


class Readers:
    """Two threads whose queries (autocommit, as the stand-in's HTTP threads run them)
    keep a read transaction open nearly all the time."""

    def __init__(self, store: Store) -> None:
        self.stop_event = threading.Event()
        self.reads = 0
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._read, args=(store,), daemon=True) for _ in range(2)
        ]
        for thread in self.threads:
            thread.start()

    def _read(self, store: Store) -> None:
        while not self.stop_event.is_set():
            try:
                store.read("SELECT count(*) FROM orders_enriched, range(100000)")
                self.reads += 1
            except Exception as exc:  # noqa: BLE001 - a failed query is what the test counts
                self.errors.append(repr(exc))

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(10)


def write(store: Store, applies: int) -> int:
    """Apply ``applies`` batches; the largest the log got."""
    largest = 0
    for i in range(applies):
        store.apply([upserts(store, i * 1000)], {("orders_enriched", 0): (i + 1, None)})
        largest = max(largest, store.wal_bytes())
    return largest


def test_duckdb_alone_never_checkpoints_an_upsert_while_a_reader_is_open(
    tmp_path: Path, monkeypatch
) -> None:
    """The cause: with a 1 MB automatic threshold and no checkpoint of our own, the log
    passes it many times over, because every commit finds a reader open."""
    monkeypatch.setitem(store_module.DUCKDB_CONFIG, "checkpoint_threshold", "1MB")
    store = Store(load_tables(), str(tmp_path / "p.duckdb"), checkpoint_wal_bytes=2**62)
    readers = Readers(store)
    try:
        assert write(store, 40) > 4 * MB
    finally:
        readers.stop()
    assert store.checkpoints == {"done": 0, "failed": 0}
    store.close()


def test_the_log_stays_bounded_and_every_row_stays_readable(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    store = Store(load_tables(), str(path), checkpoint_wal_bytes=1 * MB)
    readers = Readers(store)
    try:
        largest = write(store, 40)
    finally:
        readers.stop()
    assert store.checkpoints["done"] >= 2, store.last_checkpoint_error
    assert largest < 1.5 * MB  # one write (about 0.1 MB) past the bound at most
    assert readers.reads > 10 and readers.errors == []  # queries ran throughout, none failed
    assert store.read("SELECT count(*), min(version) FROM orders_enriched") == [(300, 39_000)]
    store.close()

    # What was checkpointed is in the database file: a new process reads it back.
    again = Store(load_tables(), str(path))
    assert again.read("SELECT count(*), max(version) FROM orders_enriched") == [(300, 39_299)]
    assert again.load_offsets()[("orders_enriched", 0)][0] == 40
    again.close()

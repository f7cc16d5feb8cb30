"""Realtime ingestion: consume the topics the table configs name into the store.

One assign()-based consumer reads every partition of every table's topic (Pinot's
low-level consumer does the same: it owns offsets, no consumer group). Offsets
are committed to the store with the rows.

A topic deleted and created again (a broker whose data was lost, a cluster rebuilt)
comes back empty and is refilled from offset 0. Two checks notice it:

* a fetched offset lower than the next expected one (librdkafka reset an
  out-of-range position to the beginning);
* after a connection error, the last consumed record is re-read and compared
  with its fingerprint: a missing or different record means a new topic that
  has already been refilled past our position.

Either way the partition is re-read from offset 0. Re-read records are applied
as "replayed": upsert and dedup make them idempotent, and they are not appended
to an upsert table's history a second time.

Its positions are reported for pipeline health (:mod:`contract.positions`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import Counter, defaultdict

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from contract import kafka
from contract.conf import KafkaConfig
from contract.events import topic_name
from contract.positions import PositionReporter
from pinot.definitions import TableDef
from pinot.store import RECORD_ERRORS, Batch, RecordError, Store, to_row

log = logging.getLogger(__name__)


#: A write takes what has arrived until records pause for this long: the stream job
#: writes a burst per micro-batch, and a burst becomes one transaction.
QUIET_SECONDS = 0.05
#: ... but never gathers for longer than this while records keep coming.
MAX_GATHER_SECONDS = 0.5


def fingerprint(key: bytes | None, value: bytes | None) -> str:
    return hashlib.blake2b((key or b"") + b"\0" + (value or b""), digest_size=12).hexdigest()


class Ingester:
    """Background thread: Kafka -> :class:`Store`."""

    def __init__(
        self,
        store: Store,
        config: KafkaConfig,
        batch_size: int = 5000,
        retention_ms: int | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.batch_size = batch_size
        self.retention_ms = retention_ms
        self.by_topic: dict[str, TableDef] = {
            topic_name(t.topic, config.topic_prefix): t for t in store.tables.values()
        }
        self.positions: dict[tuple[str, int], tuple[int, str | None]] = store.load_offsets()
        #: (topic, partition) -> offset below which records were consumed before a reset
        self.replay_until: dict[tuple[str, int], int] = {}
        self.stats = {"consumed": 0, "dropped": 0, "resets": 0, "errors": 0}
        #: Records skipped because the store cannot hold them, by reason (also in /debug).
        self.skipped: Counter[str] = Counter()
        self.stats["skipped_by_reason"] = self.skipped  # type: ignore[assignment]
        self.last_error: str | None = None
        #: topic -> broker timestamp (ms) of the newest record consumed (ingestion delay)
        self.newest_ms: dict[str, int] = {}
        self._verify = bool(self.positions)  # a persisted position must match the broker
        self.reporter = PositionReporter("pinot", config)
        #: topic -> its partitions
        self.partitions: dict[str, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pinot-ingest", daemon=True)
        self._cond = threading.Condition()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Ingester:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self._verify = True
        self.last_error = str(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume_loop()
            except Exception as exc:  # keep serving queries; retry the broker
                self.stats["errors"] += 1
                self.last_error = repr(exc)
                log.exception("pinot ingestion failed; retrying in 1 s")
                self._verify = True
                self._stop.wait(1.0)

    def _assign(self, cons) -> bool:
        """Assign every partition of every topic; False while a topic is missing."""
        try:
            existing = cons.list_topics(timeout=5).topics
        except KafkaException:
            return False
        parts = []
        for name in self.by_topic:
            meta = existing.get(name)
            if meta is None or meta.error is not None or not meta.partitions:
                return False
            self.partitions[name] = sorted(meta.partitions)
            for p in sorted(meta.partitions):
                parts.append(TopicPartition(name, p, self.positions.get((name, p), (0, None))[0]))
        cons.assign(parts)
        return True

    def _consume_loop(self) -> None:
        cons = kafka.consumer(self.config, error_cb=self._on_error)
        try:
            while not self._stop.is_set() and not self._assign(cons):
                self._stop.wait(0.5)
            last_purge = 0.0
            while not self._stop.is_set():
                if self._verify:
                    self._verify = False
                    self._verify_positions(cons)
                messages = self._gather(cons)
                if messages:
                    self._process(cons, messages)
                if self.reporter.due():
                    self._report()
                if self.retention_ms and time.monotonic() - last_purge > 60:
                    last_purge = time.monotonic()
                    self.store.purge_older_than(int(time.time() * 1000) - self.retention_ms)
        finally:
            cons.close()

    def _gather(self, cons) -> list:
        """The records of one write: what arrives until a pause of ``QUIET_SECONDS``, at
        most ``batch_size`` records or ``MAX_GATHER_SECONDS`` of them; nothing after
        ``QUIET_SECONDS`` when nothing comes (the loop's other duties run in between).

        A transaction's cost is mostly fixed (docs/performance.md), so the stand-in's CPU
        follows the number of writes: the stream job writes a burst per micro-batch, and a
        burst becomes one write. While a write runs, records queue in the consumer, so the
        next batch grows when writes slow down.
        """
        messages: list = []
        deadline = None
        while len(messages) < self.batch_size and not self._stop.is_set():
            got = cons.consume(self.batch_size - len(messages), timeout=QUIET_SECONDS)
            messages += got
            if not any(msg.error() is None for msg in got):
                break  # a pause (or only end-of-partition events): the burst is in
            if deadline is None:
                deadline = time.monotonic() + MAX_GATHER_SECONDS
            elif time.monotonic() >= deadline:
                break
        return messages

    def _report(self) -> None:
        """Tell the broker how far each table's topic is read (pipeline health)."""
        self.reporter.report(
            {
                topic: {p: self.positions.get((topic, p), (0, None))[0] for p in parts}
                for topic, parts in self.partitions.items()
            }
        )

    # ------------------------------------------------------------------ records

    def _reset(self, cons, topic: str, partition: int, seek: bool = True) -> None:
        old = self.positions.get((topic, partition), (0, None))[0]
        log.warning("topic %s[%d] was recreated: re-reading from offset 0", topic, partition)
        self.stats["resets"] += 1
        self.replay_until[(topic, partition)] = max(
            old, self.replay_until.get((topic, partition), 0)
        )
        self.positions[(topic, partition)] = (0, None)
        if seek:
            cons.seek(TopicPartition(topic, partition, 0))

    def _verify_positions(self, cons) -> None:
        """Re-read the last consumed record of each partition; reset when it changed."""
        if not self._assign(cons):
            self._verify = True
            return
        probe = kafka.consumer(self.config)
        changed = []
        try:
            for (topic, part), (nxt, fp) in list(self.positions.items()):
                if topic not in self.by_topic or nxt == 0:
                    continue
                probe.assign([TopicPartition(topic, part, nxt - 1)])
                found = None
                deadline = time.monotonic() + 5
                while found is None and time.monotonic() < deadline:
                    msg = probe.poll(0.1)
                    if msg is None:
                        continue
                    if msg.error() is None:
                        found = msg
                    elif msg.error().code() == KafkaError._PARTITION_EOF:
                        break
                if (
                    found is None
                    or found.offset() != nxt - 1
                    or (fp is not None and fingerprint(found.key(), found.value()) != fp)
                ):
                    changed.append((topic, part))
        finally:
            probe.close()
        for topic, part in changed:
            self._reset(cons, topic, part, seek=False)
        self._assign(cons)

    def _process(self, cons, messages) -> None:
        rows: dict[str, list] = defaultdict(list)
        replayed: dict[str, list] = defaultdict(list)
        records: list[tuple] = []  # (table, row, replayed, topic, partition, offset)
        # Positions are published only after the rows are committed: whoever sees
        # an offset as consumed (wait_caught_up, /debug) can query its rows.
        positions = dict(self.positions)
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError._UNKNOWN_TOPIC,
                    KafkaError._UNKNOWN_PARTITION,
                ):
                    self._verify = True
                    continue
                self.last_error = str(err)
                continue
            topic, part, offset = msg.topic(), msg.partition(), msg.offset()
            table = self.by_topic.get(topic)
            if table is None:
                continue
            expected = positions.get((topic, part), (0, None))[0]
            if offset < expected:
                self._reset(cons, topic, part, seek=False)
            positions[(topic, part)] = (offset + 1, fingerprint(msg.key(), msg.value()))
            self.stats["consumed"] += 1
            self.newest_ms[topic] = max(self.newest_ms.get(topic, 0), msg.timestamp()[1])
            try:
                row = to_row(table, json.loads(msg.value()))
            except (*RECORD_ERRORS, ValueError, TypeError) as exc:
                self._skip(topic, part, offset, exc)
                continue
            is_replay = offset < self.replay_until.get((topic, part), 0)
            rows[table.name].append(row)
            replayed[table.name].append(is_replay)
            records.append((table.name, row, is_replay, topic, part, offset))
        batches = [Batch(self.store.tables[name], rows[name], replayed[name]) for name in rows]
        try:
            self.store.apply(batches, positions)
        except RECORD_ERRORS as exc:
            # Some record the store cannot hold: apply them one by one, skip only that one.
            log.warning("pinot: a batch failed (%s); applying its records one by one", exc)
            self._apply_one_by_one(records, positions)
        self.positions = positions
        with self._cond:
            self._cond.notify_all()

    def _skip(self, topic: str, part: int, offset: int, exc: BaseException) -> None:
        """Count and log a record the store cannot take; the offset moves past it."""
        reason = exc.reason if isinstance(exc, RecordError) else type(exc).__name__
        self.stats["dropped"] += 1
        self.skipped[reason] += 1
        log.warning("pinot: skipping %s[%d]@%d (%s): %s", topic, part, offset, reason, exc)

    def _apply_one_by_one(self, records: list[tuple], positions: dict) -> None:
        """Re-apply a failed batch record by record (in order, so upserts still end on the
        newest), skipping what fails; then commit the offsets past all of them."""
        for name, row, is_replay, topic, part, offset in records:
            try:
                self.store.apply([Batch(self.store.tables[name], [row], [is_replay])], {})
            except RECORD_ERRORS as exc:
                self._skip(topic, part, offset, exc)
        self.store.apply([], positions)

    # ------------------------------------------------------------------ status

    def lag(self) -> dict[str, int]:
        """Records behind the true end of each topic (their end offsets now)."""
        cons = kafka.consumer(self.config)
        try:
            out = {}
            for topic in self.by_topic:
                ends = kafka.end_offsets(cons, topic)
                out[topic] = sum(
                    max(0, end - self.positions.get((topic, p), (0, None))[0])
                    for p, end in ends.items()
                )
            return out
        finally:
            cons.close()

    def wait_caught_up(self, timeout: float = 15.0) -> None:
        """Block until every record now in the topics is queryable (tests, bench)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                lag = self.lag()
            except KafkaException:
                lag = {"?": 1}
            if not any(lag.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"pinot ingestion still behind: {lag}")
            with self._cond:
                self._cond.wait(0.05)

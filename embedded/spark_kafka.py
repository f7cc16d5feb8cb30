"""Kafka for Spark as a Python data source: the embedded mode's connector.

The spark-sql-kafka jar cannot be downloaded on the build machines, so this
``pyspark.sql.datasource`` plays its part here; production uses Spark's native
``kafka`` format with the same columns and options, so the job is the same code.

* **Reading** (``spark.readStream.format("ordertrack_kafka")``): the driver only
  plans offsets; executors read the ranges. Offsets are ``{topic: {partition:
  next}}`` in Spark's offset log. Topic partitions are packed into at most
  ``numPartitions`` input partitions (default 2: one per core here), because
  every Python task has a fixed cost. Executors read them with
  :func:`embedded.kafka_reads.read_ranges`.
* **Writing** (``writeStream.foreach(KafkaRowWriter(...))``): the micro-batch's
  own executor tasks produce the rows' ``(topic, key, value)``; a task fails unless
  the broker acknowledged all.
* Tansu's listed high watermark is the base offset of the *last batch* + 1, so the
  end of each partition is read forward, from where the last scan ended, to the
  exact watermark of the fetch response. With ``endOffsets=background`` (the
  default) a driver thread scans continuously and a micro-batch plans from its
  newest ends without waiting; ``scan`` scans before every batch. Fetch waits leave the broker time to find
  the data (docs/broker.md): it answers nothing, without an error, when listing a
  partition's batches takes longer than the fetch's max wait.
* The embedded broker is in memory: after it restarts, topics are empty and
  refilled from offset 0. A checkpointed offset beyond a partition's true end
  therefore means "the topic was reset": the partition restarts from its
  beginning (logged), and the join's commutative aggregates make the replay
  produce the same final records.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from embedded.kafka_reads import (
    CACHE_LOCK,
    KafkaRange,
    UntilRollover,
    cached_client,
    describe_topic_ids,
    new_admin,
    new_consumer,
    read_ranges,
    rollover_log,
)

log = logging.getLogger(__name__)

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)

#: topic -> partition (as text: JSON keys) -> next offset, plus ``_topic_ids``: topic -> id.
Offsets = dict[str, dict[str, Any]]
TOPIC_IDS = "_topic_ids"
#: How long one micro-batch's end-of-partition scan may take: the scan runs on the driver
#: before every batch, and records it leaves behind only wait for the next batch. When
#: nothing is new the scan is one fetch that waits (up to the fetch wait) for data.
END_SCAN_SECONDS = 0.5
#: Fewer records than this in a micro-batch are read by one task (see ``partitions``).
MIN_RECORDS_PER_TASK = 1000


class KafkaRanges(InputPartition):
    """One Spark input partition: several ranges, read by one task with one assignment."""

    def __init__(self, ranges: list[KafkaRange]) -> None:
        self.ranges = ranges


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over a fixed list of topics, assign()-based."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # ``options`` is Spark's case-insensitive map: its keys are stored lower-cased, so
        # it is read through its own ``get``, never copied into a plain dict.
        self.bootstrap = options["kafka.bootstrap.servers"]
        self.topics = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        self.starting = options.get("startingOffsets", "earliest")
        self.timeout = float(options.get("timeoutSeconds", "10"))
        self.num_partitions = max(1, int(options.get("numPartitions", "2")))
        self.max_offsets = int(options.get("maxOffsetsPerTrigger", "0"))
        self.end_offsets = options.get("endOffsets", "background")
        self._consumer = UntilRollover(self.bootstrap, new_consumer)
        self._admin = UntilRollover(self.bootstrap, new_admin)
        self._target: Offsets | None = None
        self._partitions: dict[str, list[int]] | None = None
        self._partitions_at = 0.0
        self._reporter: Any = None
        #: Where the last end scan ended, per (topic, partition), and in which topic ids.
        self._scanned: dict[tuple[str, int], int] = {}
        self._scanned_ids: dict[str, str] = {}
        self._behind_logged_at = 0.0
        self._driver_threads()

    def _driver_threads(self) -> None:
        #: The scan's clients are used by one thread at a time (the tracker or Spark's).
        self._scan_lock = threading.Lock()
        #: endOffsets=background: the tracker thread and the newest ends it found.
        self._tracker: threading.Thread | None = None
        self._tracked = threading.Condition()
        self._tracked_ends: Offsets | None = None
        self._tracker_error: BaseException | None = None
        self._stopping = threading.Event()

    _DRIVER_ONLY = (
        "_scan_lock", "_tracker", "_tracked", "_tracked_ends", "_tracker_error", "_stopping",
    )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the reader pickled (its ``read``): without the driver's threads."""
        return {k: v for k, v in self.__dict__.items() if k not in self._DRIVER_ONLY}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._driver_threads()

    # -- driver side ---------------------------------------------------------------

    def _cons(self) -> Any:
        return self._consumer.get()

    def _true_ends(self) -> Offsets:
        """True next offset of every partition of every topic, in one forward read.

        Each partition is read from where the previous scan ended up to the exact
        high watermark of the fetch response (or end-of-partition). The first time,
        and after its topic was recreated, it starts from the listed watermark - 1
        instead, as :func:`contract.kafka.end_offsets` does: on Tansu ListOffsets
        lists every batch of the partition, which grows with the log, so it is not
        asked before every batch. With nothing new anywhere the scan is a single
        fetch that waits for data, instead of the driver polling.
        """
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        from contract.kafka import at_fetched_end, drain, partitions_of

        cons = self._cons()
        if self._partitions is None or time.monotonic() - self._partitions_at > 30:
            # Refreshed now and then so partitions added to a topic are picked up.
            self._partitions = {t: partitions_of(cons, t, self.timeout) for t in self.topics}
            self._partitions_at = time.monotonic()
        ids = self._topic_ids()
        self._scanned = {
            tp: end
            for tp, end in self._scanned.items()
            if self._scanned_ids.get(tp[0]) == ids[tp[0]]
        }
        self._scanned_ids = ids
        ends: dict[tuple[str, int], int] = {}
        starts = []
        for topic, parts in self._partitions.items():
            for p in parts:
                known = self._scanned.get((topic, p))
                if known is None:
                    low, high = cons.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=self.timeout, cached=False
                    )
                    ends[(topic, p)] = known = high
                    if high > low:
                        known = max(high - 1, low)
                ends.setdefault((topic, p), known)
                starts.append(TopicPartition(topic, p, known))
        cons.assign(starts)
        pending = {(tp.topic, tp.partition) for tp in starts}
        # A partition that keeps growing may never report end-of-partition while we
        # read it; the highest offset seen by then is a safe end for this batch (it
        # exists), and the next batch takes the rest.
        deadline = time.monotonic() + END_SCAN_SECONDS
        try:
            while pending and time.monotonic() < deadline:
                for msg in drain(cons, 0.01):
                    err, tp = msg.error(), (msg.topic(), msg.partition())
                    if err is None:
                        ends[tp] = max(ends[tp], msg.offset() + 1)
                        if at_fetched_end(cons, msg):
                            pending.discard(tp)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(tp)
                    else:
                        raise KafkaException(err)
            behind = {
                tp: high
                for tp in pending
                if (high := cons.get_watermark_offsets(TopicPartition(*tp), cached=True)[1])
                > ends[tp]
            }
        finally:
            cons.unassign()
        if behind and time.monotonic() - self._behind_logged_at > 60:
            self._behind_logged_at = time.monotonic()
            log.warning(
                "kafka source: the broker returned no records below its high watermark "
                "within the scan (partition: end read, watermark): %s",
                {f"{t}[{p}]": (ends[(t, p)], high) for (t, p), high in sorted(behind.items())},
            )
        self._scanned.update(ends)
        result: Offsets = {t: {} for t in self.topics}
        for (topic, p), end in sorted(ends.items()):
            result[topic][str(p)] = end
        result[TOPIC_IDS] = ids
        return result

    def _topic_ids(self) -> dict[str, str]:
        """Each topic's id: a topic deleted and created again (the embedded broker restarted)
        gets a new one, even once it has refilled past the checkpointed offsets."""
        from contract.positions import topic_ids

        return topic_ids(self._admin.get(), self.topics, self.timeout)

    def _begin(self, start: dict, end: Offsets, topic: str, p: str) -> tuple[int, bool]:
        """Where to read ``topic[p]`` from, and whether the topic was reset since ``start``.

        A new topic id after a rollover of the embedded broker moves the offset to the same
        record in the new log (the rollover log says by how much); any other new id, or an
        offset beyond the end, means the broker lost its data: read again from 0."""
        begun = start.get(topic, {}).get(p, 0)
        old_id = start.get(TOPIC_IDS, {}).get(topic)
        new_id = end.get(TOPIC_IDS, {}).get(topic)
        if old_id is not None and new_id is not None and old_id != new_id:
            moved = rollover_log(self.bootstrap).translate(old_id, {int(p): begun}, new_id)
            return (0, True) if moved is None else (moved[int(p)], False)
        if begun > end[topic][p]:
            return 0, True
        return begun, False

    def _ranges(self, start: dict, end: Offsets) -> dict[tuple[str, str], tuple[int, int]]:
        return {
            (t, p): (self._begin(start, end, t, p)[0], stop)
            for t, parts in end.items()
            if t != TOPIC_IDS
            for p, stop in parts.items()
        }

    def initialOffset(self) -> dict:
        if self.starting == "latest":
            return self._ends_when_reachable()
        if self.starting != "earliest":
            return json.loads(self.starting)
        from contract.kafka import partitions_of

        with self._scan_lock:
            offsets: Offsets = {
                topic: {str(p): 0 for p in partitions_of(self._cons(), topic, self.timeout)}
                for topic in self.topics
            }
            offsets[TOPIC_IDS] = self._topic_ids()
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends_when_reachable()

    def _ends_when_reachable(self) -> Offsets:
        """:meth:`_true_ends`, waiting out a broker that is briefly unreachable (the
        embedded one restarts empty in a few seconds) instead of failing the query."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + 6 * self.timeout
        while True:
            try:
                with self._scan_lock:
                    return self._true_ends()
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("kafka source: broker unreachable (%s); retrying", exc)
                self._partitions = None
                time.sleep(1)

    def _track_ends(self) -> None:
        """The tracker thread: scan again as soon as a scan ends (a scan with nothing new
        is one fetch that waits for data), publishing each scan's ends."""
        while not self._stopping.is_set():
            try:
                ends = self._ends_when_reachable()
            except BaseException as exc:  # noqa: BLE001 - reported by the next latestOffset
                with self._tracked:
                    self._tracker_error = exc
                    self._tracked.notify_all()
                return
            with self._tracked:
                self._tracked_ends = ends
                self._tracked.notify_all()

    def _tracked_latest(self) -> Offsets:
        """The newest ends the tracker thread found (started on first use; the first call
        waits for its first scan). Each scan's ends are at or past the previous one's."""
        if self._tracker is None:
            self._tracker = threading.Thread(
                target=self._track_ends, name="kafka-source-end-offsets", daemon=True
            )
            self._tracker.start()
        with self._tracked:
            while self._tracked_ends is None and self._tracker_error is None:
                self._tracked.wait(1)
            if self._tracker_error is not None:
                raise self._tracker_error
            return self._tracked_ends

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if self._target is not None:
            ends = self._target
        elif self.end_offsets == "background":
            ends = self._tracked_latest()
        else:
            ends = self._ends_when_reachable()
        for topic, parts in ends.items():
            if topic == TOPIC_IDS:
                continue
            for p in parts:
                if self._begin(start, ends, topic, p)[1]:
                    log.warning(
                        "kafka source: %s[%s] was reset since offset %s (new topic id or "
                        "offset beyond its end): re-reading the partition from its beginning",
                        topic,
                        p,
                        start.get(topic, {}).get(p),
                    )
        return self._capped(start, ends)

    def _capped(self, start: dict, ends: Offsets) -> Offsets:
        """Ends moved back so one batch reads at most ``maxOffsetsPerTrigger`` records,
        shared in proportion to each partition's backlog (as the native source does)."""
        if self.max_offsets <= 0 or self._target is not None:
            return ends
        ranges = self._ranges(start, ends)
        total = sum(stop - begin for begin, stop in ranges.values())
        if total <= self.max_offsets:
            return ends
        capped: Offsets = {t: dict(parts) for t, parts in ends.items()}
        for (t, p), (begin, stop) in ranges.items():
            share = (stop - begin) * self.max_offsets // total
            capped[t][p] = begin + max(share, min(stop - begin, 1))
        return capped

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ids = end.get(TOPIC_IDS, {})
        ranges = [
            KafkaRange(t, int(p), begin, stop, ids.get(t))
            for (t, p), (begin, stop) in self._ranges(start, end).items()
            if stop > begin
        ]
        # A task per MIN_RECORDS_PER_TASK records, up to numPartitions: every Python task
        # has a fixed cost, and at a quiet time a batch has a handful of records.
        records = sum(r.end - r.start for r in ranges)
        tasks = min(self.num_partitions, len(ranges), -(-records // MIN_RECORDS_PER_TASK))
        # Biggest ranges first, each to the lightest partition: even tasks.
        groups: list[list[KafkaRange]] = [[] for _ in range(tasks)]
        sizes = [0] * len(groups)
        for r in sorted(ranges, key=lambda r: r.start - r.end):
            i = sizes.index(min(sizes))
            groups[i].append(r)
            sizes[i] += r.end - r.start
        return [KafkaRanges(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, KafkaRanges)
        return read_ranges(
            lambda: cached_client(new_consumer, self.bootstrap),
            partition.ranges,
            self.timeout,
            topic_ids=lambda topics: describe_topic_ids(self.bootstrap, topics, self.timeout),
            rollovers=rollover_log(self.bootstrap),
        )

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; the broker only hears how far the job has
        read, so that the embedded broker's rollover carries what it has not."""
        from contract.conf import KafkaConfig
        from contract.positions import PositionReporter

        if self._reporter is None:
            self._reporter = PositionReporter(
                "stream", KafkaConfig(bootstrap_servers=self.bootstrap)
            )
        if not self._reporter.due():
            return
        ids = end.get(TOPIC_IDS, {})
        for topic, parts in end.items():
            if topic != TOPIC_IDS and topic in ids:
                self._reporter.report(topic, ids[topic], {int(p): o for p, o in parts.items()})

    def stop(self) -> None:
        self._stopping.set()
        if self._tracker is not None:
            self._tracker.join(2 * END_SCAN_SECONDS + self.timeout)
        with self._scan_lock:
            self._consumer.close()
            self._admin.close()


class KafkaDataSource(DataSource):
    """``readStream.format("ordertrack_kafka")``: the stream reader, native options."""

    @classmethod
    def name(cls) -> str:
        return "ordertrack_kafka"

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)


class SinkError(RuntimeError):
    """The broker did not acknowledge every record: the task (and its batch) must fail."""


_PRODUCERS: dict[str, Any] = {}


def _shared_producer(bootstrap: str) -> Any:
    """One producer per worker process (creating one per task costs a broker handshake),
    replaced when a batch fails (its broker may have lost the producer's state).

    Its linger is long because a task's ``close`` flushes anyway: the linger only decides
    into how many record batches a task's rows are cut, and every batch is one more entry
    the embedded broker lists on each fetch of that partition (docs/broker.md)."""
    from contract.conf import KafkaConfig
    from contract.kafka import SharedProducer

    with CACHE_LOCK:
        shared = _PRODUCERS.get(bootstrap)
        if shared is None:
            shared = SharedProducer(
                KafkaConfig(bootstrap_servers=bootstrap),
                **{"linger.ms": 100, "queue.buffering.max.messages": 500_000},
            )
            _PRODUCERS[bootstrap] = shared
        return shared


class KafkaRowWriter:
    """``writeStream.foreach``: each executor task produces its rows' ``(topic, key,
    value)`` and fails unless the broker acknowledged every one, so Spark re-runs the
    micro-batch instead of committing it.

    A streaming ``foreach`` sink runs inside the micro-batch's own tasks (no second
    job per batch, as ``foreachBatch`` plus a batch write needs) and, unlike a Python
    stream writer, accepts the update mode of the join's aggregation.
    """

    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._batch: Any = None
        #: this task's rows, to send again with a new producer if the first one fails
        self._rows: list[tuple] = []

    def open(self, partition_id: int, epoch_id: int) -> bool:
        from contract.kafka import Deliveries

        self._batch = Deliveries(_shared_producer(self.bootstrap).get())
        self._rows = []
        return True

    def process(self, row: Any) -> None:
        from confluent_kafka import KafkaException

        self._rows.append((row.topic, row.key, row.value))
        try:
            self._batch.produce(row.topic, row.key, row.value)
        except KafkaException:  # a producer in a fatal state refuses on the spot
            _shared_producer(self.bootstrap).replace(self._batch.producer)
            raise

    def close(self, error: BaseException | None) -> None:
        from contract.kafka import Deliveries, Undelivered

        batch, self._batch = self._batch, None
        rows, self._rows = self._rows, []
        if error is not None or batch is None:
            return
        try:
            batch.flush(self.timeout)
        except Undelivered as exc:
            # The producer's broker may have lost its state (the embedded broker rolled over):
            # once more with a new producer, then fail the task (Spark re-runs the batch;
            # same records, same ids).
            shared = _shared_producer(self.bootstrap)
            shared.replace(batch.producer)
            retry, acked = Deliveries(shared.get()), set(exc.acked)
            for tag, (topic, key, value) in enumerate(rows):
                if tag not in acked:
                    retry.produce(topic, key, value, tag=tag)
            try:
                retry.flush(self.timeout)
            except Undelivered as again:
                shared.replace(retry.producer)
                raise SinkError(str(again)) from exc

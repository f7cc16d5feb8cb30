"""The streaming job: three source topics in, enriched topics out, with durable state.

Pipeline (same for both connectors)::

    orders, order_statuses, delivery_locations   (Kafka source: python data source or native)
        -> foreachBatch: parse + join (streaming.join, pure) against keyed state
        -> orders_enriched, delivery_statuses, order_items_enriched, dead_letters (confluent-kafka)

Two state strategies share the join function (``STREAMING_STATE``):

* ``driver`` (default, fastest measured): state in the driver, changelog in
  SQLite in the checkpoint directory (see :mod:`streaming.state`);
* ``spark``: ``applyInPandasWithState`` grouped by order id, state in Spark's
  state store (RocksDB with changelog checkpointing). Scales past one driver,
  but measured 3-4x slower per micro-batch on 2 cores (bench/results/streaming-*).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracker.core.conf import BASE_DIR, env_int, env_str, kafka_config, var_dir
from tracker.core.events import SOURCE_TOPICS, Topic, now_ms, topic_name

from . import join

log = logging.getLogger("streaming")

READY_LINE = "streaming: ready"


def _default_checkpoint_dir() -> str:
    return str(var_dir() / "checkpoints" / "streaming")


@dataclass(frozen=True)
class Settings:
    """Every knob of the job, read from the environment with embedded defaults."""

    bootstrap_servers: str = field(default_factory=lambda: kafka_config().bootstrap_servers)
    input_prefix: str = field(default_factory=lambda: kafka_config().topic_prefix)
    output_prefix: str = field(
        default_factory=lambda: env_str("STREAMING_OUTPUT_PREFIX", kafka_config().topic_prefix)
    )
    connector: str = field(default_factory=lambda: env_str("STREAMING_KAFKA_CONNECTOR", "python"))
    #: python connector only: "partitioned" (one Spark task per Kafka partition) or "driver".
    python_reader: str = field(default_factory=lambda: env_str("STREAMING_PYTHON_READER", "driver"))
    state: str = field(default_factory=lambda: env_str("STREAMING_STATE", "driver"))
    checkpoint_dir: str = field(
        default_factory=lambda: env_str("STREAMING_CHECKPOINT_DIR", _default_checkpoint_dir())
    )
    trigger_ms: int = field(default_factory=lambda: env_int("STREAMING_TRIGGER_MS", 100))
    shuffle_partitions: int = field(
        default_factory=lambda: env_int("STREAMING_SHUFFLE_PARTITIONS", 2)
    )
    starting_offsets: str = field(
        default_factory=lambda: env_str("STREAMING_STARTING_OFFSETS", "earliest")
    )
    buffer_ttl_ms: int = field(
        default_factory=lambda: env_int("STREAMING_BUFFER_TTL_MS", join.DEFAULT_BUFFER_TTL_MS)
    )
    done_ttl_ms: int = field(
        default_factory=lambda: env_int("STREAMING_DONE_TTL_MS", join.DEFAULT_DONE_TTL_MS)
    )
    spark_master: str = field(default_factory=lambda: env_str("SPARK_MASTER", "local[2]"))
    available_now: bool = False

    def __post_init__(self) -> None:
        if self.connector not in ("python", "native"):
            raise ValueError(
                f"STREAMING_KAFKA_CONNECTOR must be python or native: {self.connector}"
            )
        if self.python_reader not in ("partitioned", "driver"):
            raise ValueError(
                f"STREAMING_PYTHON_READER must be partitioned or driver: {self.python_reader}"
            )
        if self.state not in ("driver", "spark"):
            raise ValueError(f"STREAMING_STATE must be driver or spark: {self.state}")

    @property
    def source_topics(self) -> list[str]:
        return [topic_name(t, self.input_prefix) for t in SOURCE_TOPICS]

    def logical_topic(self, physical: str) -> Topic:
        return Topic(physical[len(self.input_prefix) :])

    def output_topic(self, topic: Topic) -> str:
        return topic_name(topic, self.output_prefix)


# ------------------------------------------------------------------------------ Spark


def spark_session(settings: Settings, app_name: str = "ordertrack-streaming") -> Any:
    """A local SparkSession tuned for latency (see the README's streaming section)."""
    # Python workers must import `tracker` and `streaming`.
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(BASE_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(BASE_DIR), *filter(None, paths)])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark_master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.sql.streaming.minBatchesToRetain", "20")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # With a 100 ms trigger a 200 ms batch is normal, not news: our own one-line progress
    # log reports every batch's duration and lag, so Spark's per-batch warning is noise.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
        jvm.org.apache.logging.log4j.Level.ERROR,
    )
    if settings.connector == "python":
        from .kafka_source import KafkaDataSource, KafkaDriverDataSource

        spark.dataSource.register(KafkaDataSource)
        spark.dataSource.register(KafkaDriverDataSource)
    return spark


def source_frame(spark: Any, settings: Settings, starting_offsets: str | None = None) -> Any:
    """The union of the three source topics with the native Kafka source's columns."""
    fmt = {
        ("python", "partitioned"): "ordertrack_kafka",
        ("python", "driver"): "ordertrack_kafka_driver",
    }.get((settings.connector, settings.python_reader), "kafka")
    reader = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", ",".join(settings.source_topics))
        .option("startingOffsets", starting_offsets or settings.starting_offsets)
    )
    if settings.connector == "native":
        # Same latency rules as the python source: short fetch waits, no data loss surprises.
        reader = (
            reader.option("kafka.fetch.max.wait.ms", "5")
            .option("failOnDataLoss", "false")
            .option("kafka.group.id", "ordertrack-spark-source")
        )
    return reader.load().select("key", "value", "topic", "partition", "offset", "timestamp")


# ------------------------------------------------------------------------------ sink


class SinkError(RuntimeError):
    """Some outputs were not acknowledged: the micro-batch must fail and be re-run."""


class KafkaSink:
    """Produce join outputs with confluent-kafka; :meth:`flush` fails on anything undelivered."""

    def __init__(self, settings: Settings) -> None:
        from tracker.core.conf import KafkaConfig
        from tracker.core.kafka import producer

        self.settings = settings
        self._producer = producer(
            KafkaConfig(bootstrap_servers=settings.bootstrap_servers),
            **{"linger.ms": 1, "queue.buffering.max.messages": 500_000},
        )
        self._failures: list[str] = []
        self._topics = {t: settings.output_topic(t) for t in Topic}

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failures.append(f"{msg.topic()}: {err}")

    def send(self, outputs: Iterable[join.Output]) -> int:
        count = 0
        for out in outputs:
            while True:
                try:
                    self._producer.produce(
                        self._topics[out.topic],
                        key=out.key,
                        value=out.value,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
            count += 1
        return count

    def close(self) -> None:
        """Deliver what is queued and drop the client (librdkafka threads stop with it)."""
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None

    def flush(self, timeout: float = 30.0) -> None:
        remaining = self._producer.flush(timeout)
        failures, self._failures = self._failures, []
        if remaining or failures:
            raise SinkError(
                f"{remaining} outputs undelivered after {timeout}s, {len(failures)} failed: "
                + "; ".join(failures[:3])
            )


# ------------------------------------------------------------------------------ batches


@dataclass
class BatchStats:
    batch_id: int
    rows: int = 0
    outputs: int = 0
    dead_letters: int = 0
    join_ms: float = 0.0
    sink_ms: float = 0.0
    lag_ms: int | None = None
    skipped: bool = False


def _ts_ms(ts: Any) -> int:
    return int(ts.timestamp() * 1000) if ts is not None else 0


class DriverStateBatches:
    """foreachBatch handler for ``STREAMING_STATE=driver`` (see :mod:`streaming.state`)."""

    def __init__(self, settings: Settings, sink: KafkaSink) -> None:
        from .state import DriverStateStore

        self.settings = settings
        self.sink = sink
        self.store = DriverStateStore(Path(settings.checkpoint_dir) / "driver-state.sqlite")
        self.stats: dict[int, BatchStats] = {}
        self._last_expiry_scan = 0.0

    def close(self) -> None:
        self.sink.close()
        self.store.close()

    def _expiry_candidates(self, now: int) -> list[int]:
        if time.monotonic() - self._last_expiry_scan < 1.0:
            return []
        self._last_expiry_scan = time.monotonic()
        ttl = {
            "buffer_ttl_ms": self.settings.buffer_ttl_ms,
            "done_ttl_ms": self.settings.done_ttl_ms,
        }
        out = []
        for order_id, st in self.store.states.items():
            expiry = join.next_expiry(st, **ttl)
            if expiry is not None and expiry <= now:
                out.append(order_id)
        return out

    def __call__(self, df: Any, batch_id: int) -> None:
        stats = BatchStats(batch_id)
        self.stats[batch_id] = stats
        if batch_id <= self.store.last_batch_id:
            stats.skipped = True  # applied and flushed before a crash; Spark is re-running it
            log.info("batch %d already applied to the state; skipping its re-run", batch_id)
            return
        rows = df.collect()
        started = time.perf_counter()
        now = now_ms()
        records = [
            join.SourceRecord(
                topic=self.settings.logical_topic(r.topic),
                partition=r.partition,
                offset=r.offset,
                key=bytes(r.key) if r.key is not None else None,
                value=bytes(r.value) if r.value is not None else None,
                timestamp=_ts_ms(r.timestamp),
            )
            for r in rows
        ]
        result = join.process_batch(
            self.store.states,
            records,
            now,
            buffer_ttl_ms=self.settings.buffer_ttl_ms,
            done_ttl_ms=self.settings.done_ttl_ms,
            expiry_candidates=self._expiry_candidates(now),
        )
        stats.rows = len(records)
        stats.join_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        stats.outputs = self.sink.send(result.outputs)
        self.sink.flush()
        stats.sink_ms = (time.perf_counter() - started) * 1000
        stats.dead_letters = sum(1 for o in result.outputs if o.topic is Topic.DEAD_LETTERS)
        self.store.commit(batch_id, result.states)
        stamps = [r.timestamp for r in records if r.timestamp]
        stats.lag_ms = now_ms() - min(stamps) if stamps else None


def _spark_state_function(settings: Settings):
    """The ``applyInPandasWithState`` function: the same pure join, state as one JSON column."""
    ttl = {"buffer_ttl_ms": settings.buffer_ttl_ms, "done_ttl_ms": settings.done_ttl_ms}
    input_prefix = settings.input_prefix

    def fn(key: tuple, pdfs: Iterator[Any], gstate: Any) -> Iterator[Any]:
        import pandas as pd

        now = now_ms()
        state = json.loads(gstate.get[0]) if gstate.exists else None
        outputs: list[join.Output] = []
        if gstate.hasTimedOut:
            result = join.expire_only(state, now, **ttl)
        else:
            parsed: list[join.ParsedEvent] = []
            for pdf in pdfs:
                for r in pdf.itertuples(index=False):
                    rec = join.SourceRecord(
                        topic=Topic(r.topic[len(input_prefix) :]),
                        partition=int(r.partition),
                        offset=int(r.offset),
                        key=r.key,
                        value=r.value,
                    )
                    p = join.parse_record(rec)
                    if isinstance(p, join.Output):
                        outputs.append(p)
                    elif p.event.order_id != key[0]:
                        outputs.append(join.dead_letter(rec, "message key is not the order_id"))
                    else:
                        parsed.append(p)
            result = join.apply_events(state, parsed, now, **ttl)
        outputs.extend(result.outputs)
        if result.state is None:
            if gstate.exists:
                gstate.remove()
        else:
            gstate.update((json.dumps(result.state, separators=(",", ":")),))
            expiry = join.next_expiry(result.state, **ttl)
            if expiry is not None:
                gstate.setTimeoutDuration(max(expiry - now, 1))
        yield pd.DataFrame(
            {
                "out_topic": [o.topic.value for o in outputs],
                "out_key": [o.key for o in outputs],
                "out_value": [o.value for o in outputs],
            }
        )

    return fn


class SparkStateBatches:
    """foreachBatch handler for ``STREAMING_STATE=spark``: produce what the state operator emitted."""

    def __init__(self, settings: Settings, sink: KafkaSink) -> None:
        self.settings = settings
        self.sink = sink
        self.stats: dict[int, BatchStats] = {}

    def close(self) -> None:
        self.sink.close()

    def __call__(self, df: Any, batch_id: int) -> None:
        stats = BatchStats(batch_id)
        self.stats[batch_id] = stats
        started = time.perf_counter()
        rows = df.collect()
        stats.join_ms = (time.perf_counter() - started) * 1000
        outputs = [join.Output(Topic(r.out_topic), r.out_key, bytes(r.out_value)) for r in rows]
        started = time.perf_counter()
        stats.outputs = self.sink.send(outputs)
        self.sink.flush()
        stats.sink_ms = (time.perf_counter() - started) * 1000
        stats.dead_letters = sum(1 for o in outputs if o.topic is Topic.DEAD_LETTERS)


def start_query(spark: Any, settings: Settings) -> tuple[Any, Any]:
    """Start the streaming query; returns (query, batch handler)."""
    from tracker.core.kafka import ensure_topics

    ensure_topics(
        [Topic(t) for t in Topic],
        config=replace(kafka_config(), bootstrap_servers=settings.bootstrap_servers),
    )
    if settings.output_prefix != settings.input_prefix:
        ensure_topics(
            [Topic(t) for t in Topic],
            config=replace(
                kafka_config(),
                bootstrap_servers=settings.bootstrap_servers,
                topic_prefix=settings.output_prefix,
            ),
        )
    Path(settings.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    sink = KafkaSink(settings)
    frame = source_frame(spark, settings)
    handler: Any
    if settings.state == "driver":
        spark_offsets = Path(settings.checkpoint_dir) / "spark" / "offsets"
        state_db = Path(settings.checkpoint_dir) / "driver-state.sqlite"
        if state_db.exists() and not spark_offsets.exists():
            # The state belongs to a Spark checkpoint that is gone: batch ids restart at 0,
            # so keeping it would skip new batches as "already applied".
            log.warning("streaming: Spark checkpoint missing; discarding orphan %s", state_db)
            for suffix in ("", "-wal", "-shm"):
                Path(f"{state_db}{suffix}").unlink(missing_ok=True)
        handler = DriverStateBatches(settings, sink)
        stream = frame
    else:
        from pyspark.sql import functions as F
        from pyspark.sql.streaming.state import GroupStateTimeout

        handler = SparkStateBatches(settings, sink)
        keyed = frame.withColumn(
            "order_id", F.coalesce(F.expr("try_cast(cast(key as string) as bigint)"), F.lit(-1))
        )
        stream = keyed.groupBy("order_id").applyInPandasWithState(
            _spark_state_function(settings),
            outputStructType="out_topic string, out_key binary, out_value binary",
            stateStructType="state string",
            outputMode="update",
            timeoutConf=GroupStateTimeout.ProcessingTimeTimeout,
        )
    writer = (
        stream.writeStream.foreachBatch(handler)
        .outputMode("append" if settings.state == "driver" else "update")
        .option("checkpointLocation", str(Path(settings.checkpoint_dir) / "spark"))
        .queryName("ordertrack_enrich")
    )
    if settings.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_ms} milliseconds")
    return writer.start(), handler


def progress_line(progress: dict[str, Any], stats: BatchStats | None) -> str:
    """One log line per micro-batch: rows, durations, lag."""
    durations = progress["durationMs"] or {}
    parts = [
        f"batch={progress['batchId']}",
        f"rows={progress['numInputRows']}",
        f"duration_ms={durations.get('triggerExecution', 0)}",
        f"add_batch_ms={durations.get('addBatch', 0)}",
        f"wal_ms={durations.get('walCommit', 0)}",
        f"commit_ms={durations.get('commitOffsets', 0)}",
    ]
    if stats is not None:
        parts += [
            f"outputs={stats.outputs}",
            f"dead_letters={stats.dead_letters}",
            f"join_ms={stats.join_ms:.1f}",
            f"sink_ms={stats.sink_ms:.1f}",
        ]
        if stats.lag_ms is not None:
            parts.append(f"lag_ms={stats.lag_ms}")
        if stats.skipped:
            parts.append("skipped=replayed")
    return "streaming: " + " ".join(parts)


def run(settings: Settings, stop: threading.Event | None = None) -> int:
    """Run until stopped (or until caught up, with ``available_now``); return an exit code."""
    stop = stop or threading.Event()
    spark = spark_session(settings)
    query, handler = start_query(spark, settings)
    log.info(
        "streaming: started connector=%s state=%s checkpoint=%s trigger=%s",
        settings.connector,
        settings.state,
        settings.checkpoint_dir,
        "availableNow" if settings.available_now else f"{settings.trigger_ms}ms",
    )
    last_batch = -1
    ready = False

    def drain(progresses: list[Any]) -> None:
        nonlocal last_batch, ready
        for progress in progresses:
            batch_id = progress["batchId"]
            if batch_id <= last_batch:
                continue
            last_batch = batch_id
            stats = handler.stats.pop(batch_id, None)
            if progress["numInputRows"] or stats is not None:
                log.info("%s", progress_line(progress, stats))
            if not ready:
                ready = True
                print(READY_LINE, flush=True)

    try:
        while not stop.is_set() and query.isActive:
            last = query.lastProgress
            if last is not None and last["batchId"] > last_batch:
                drain(query.recentProgress)
            if len(handler.stats) > 200:
                handler.stats = {k: v for k, v in handler.stats.items() if k > last_batch}
            stop.wait(0.05)
        drain(query.recentProgress)
        if query.exception() is not None:
            log.error("streaming: query failed: %s", query.exception())
            return 1
        if not ready and settings.available_now:
            print(READY_LINE, flush=True)  # nothing to do is also "caught up"
        return 0
    finally:
        if query.isActive:
            query.stop()
        handler.close()

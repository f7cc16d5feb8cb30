"""The streaming job: three source topics in, enriched topics out, state in Spark.

Pipeline::

    orders, order_statuses, delivery_locations        (Spark's Kafka source, on executors)
      -> streaming.enrich.outputs: parse, validate, join by order (RocksDB state store)
      -> Spark's Kafka sink: the micro-batch's executor tasks produce (topic, key, value)
      -> orders_enriched, delivery_statuses, order_items_enriched, dead_letters

Every mode runs this code on Spark's own Kafka connector (its jars come from
``jvm/spark-kafka/pom.xml``); local runs and production differ only in the master URL
(``SPARK_MASTER``) and the addresses.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from contract.events import SOURCE_TOPICS, Topic, topic_name
from runtime.conf import BASE_DIR, env_bool, env_int, env_str, kafka_config, var_dir
from runtime.metrics import serve_metrics
from runtime.positions import PositionReporter

from . import enrich, metrics

log = logging.getLogger("streaming")

READY_LINE = "streaming: ready"


#: Optimizer rules that find nothing to do in the job's plan, at a cost on every batch.
EXCLUDED_RULES = (
    "org.apache.spark.sql.catalyst.optimizer.PruneFilters",
    "org.apache.spark.sql.catalyst.optimizer.RemoveRedundantAliases",
    "org.apache.spark.sql.execution.datasources.SchemaPruning",
)


#: The layout of the join state. Spark refuses to resume a checkpoint whose state has
#: another layout, so the default checkpoint is named after it and a new layout starts
#: a new checkpoint, rebuilt from the topics (docs/operations.md, "Upgrades").
#: 2: an order's lines are written from its row, no longer kept as rows of their own.
STATE_LAYOUT = 2


def _default_checkpoint_dir() -> str:
    # Not "streaming": the driver-state job that wrote there had another plan and state.
    return str(var_dir() / "checkpoints" / f"stream-join-{STATE_LAYOUT}")


class CheckpointError(RuntimeError):
    """The checkpoint's offsets and its join state do not belong together."""


def check_checkpoint(checkpoint_dir: str | Path) -> None:
    """Refuse a checkpoint whose committed batches and state store disagree.

    Resuming committed offsets with no state would treat every open order as new
    (half-empty records, lost status times); state without offsets would be
    applied to a replay from the start. Either way the fix is a rebuild.
    """
    spark_dir = Path(checkpoint_dir) / "spark"
    committed = any((spark_dir / "commits").glob("[0-9]*"))
    state = (spark_dir / "state").is_dir() and any((spark_dir / "state").iterdir())
    if committed == state:
        return
    found = "committed batches but no join state" if committed else "join state but no commits"
    raise CheckpointError(
        f"streaming: checkpoint {spark_dir} has {found}; it cannot be resumed. "
        "Rebuild from the topics: stop the job, delete that directory "
        "(STREAMING_CHECKPOINT_DIR) and start again, or run the job with `--reprocess`."
    )


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def real_time_supported() -> bool:
    """Whether this Spark runs a stateful query (the join) in real-time mode (4.3+)."""
    major, minor = (int(part) for part in spark_version().split(".")[:2])
    return (major, minor) >= (4, 3)


@dataclass(frozen=True)
class Settings:
    """Every knob of the job, read from the environment with embedded defaults."""

    bootstrap_servers: str = field(default_factory=lambda: kafka_config().bootstrap_servers)
    input_prefix: str = field(default_factory=lambda: kafka_config().topic_prefix)
    output_prefix: str = field(
        default_factory=lambda: env_str("STREAMING_OUTPUT_PREFIX", kafka_config().topic_prefix)
    )
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
    #: How long after its placement an order's join state is kept (watermark delay).
    retention: str = field(
        default_factory=lambda: env_str("STREAMING_ORDER_RETENTION", enrich.DEFAULT_RETENTION)
    )
    #: Upper bound of records read per micro-batch (0: no bound).
    max_offsets_per_trigger: int = field(
        default_factory=lambda: env_int("STREAMING_MAX_OFFSETS_PER_TRIGGER", 100_000)
    )
    #: Fail when offsets were lost (deleted by retention, reset) instead of skipping them.
    fail_on_data_loss: bool = field(
        default_factory=lambda: env_bool("STREAMING_FAIL_ON_DATA_LOSS", True)
    )
    #: Real-time mode: the long-running batch's duration, e.g.
    #: ``5 minutes``; empty runs micro-batches every ``trigger_ms`` (docs/operations.md).
    real_time: str = field(default_factory=lambda: env_str("STREAMING_REAL_TIME", ""))
    #: How the driver reads each batch's progress: ``latest`` asks for the last batch's
    #: four times a second (the batches before it only when one was missed); ``recent``
    #: asks for the last 100 batches' once a second.
    progress: str = field(default_factory=lambda: env_str("STREAMING_PROGRESS", "latest"))
    spark_master: str = field(default_factory=lambda: env_str("SPARK_MASTER", "local[2]"))
    #: Extra Spark settings, ``key=value`` pairs separated by ``;`` (tuning without a release).
    spark_conf: str = field(default_factory=lambda: env_str("STREAMING_SPARK_CONF", ""))
    #: Hadoop's local file system through java.nio (:mod:`jvm.hadoop`): where the driver
    #: and executors share this machine's files (local runs, the local cluster test);
    #: off where executors run elsewhere (compose).
    nio_local_fs: bool = field(default_factory=lambda: env_bool("STREAMING_NIO_LOCAL_FS", True))
    available_now: bool = False

    def __post_init__(self) -> None:
        if self.real_time and not real_time_supported():
            raise ValueError(
                "STREAMING_REAL_TIME: real-time mode runs this job's stateful join only on "
                f"Spark 4.3 or later (4.1 and 4.2 accept stateless queries only); this is "
                f"Spark {spark_version()}, pinned because Maven Central serves no 4.3.0 "
                "spark-sql-kafka connector (docs/operations.md). Unset STREAMING_REAL_TIME."
            )
        if self.progress not in ("latest", "recent"):
            raise ValueError(f"STREAMING_PROGRESS must be latest or recent: {self.progress}")

    @property
    def source_topics(self) -> list[str]:
        return [topic_name(t, self.input_prefix) for t in SOURCE_TOPICS]


# ------------------------------------------------------------------------------ Spark

CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


#: The class whose log says a micro-batch outlasted the trigger (quieted below).
TRIGGER_EXECUTOR = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


def spark_session(settings: Settings, app_name: str = "ordertrack-streaming") -> Any:
    """A local SparkSession tuned for latency (docs/performance.md, "The stream job")."""
    # Python workers must import `tracker` and `streaming`.
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(BASE_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(BASE_DIR), *filter(None, paths)])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark_master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "false")
        # The validation expressions derived from the contract make whole-stage methods
        # too large for the JIT (HotSpot leaves methods over 8 KB of bytecode
        # interpreted); per-operator code runs the plan faster.
        .config("spark.sql.codegen.wholeStage", "false")
        # Nor per-operator code: every task regenerates the Java source of each projection
        # to look it up in the compiled-class cache, which for these expressions costs more
        # than evaluating a micro-batch's rows interpreted (docs/performance.md, "The
        # stream job").
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        # Spark optimises and plans every micro-batch again (it keeps no plan across
        # batches), and over the contract's expressions a few of its rules cost much
        # and change nothing in this plan: exchange and subquery reuse (one shuffle, no
        # subquery), constraint propagation (filters inferred from the projections),
        # PruneFilters, RemoveRedundantAliases, SchemaPruning (file sources).
        .config("spark.sql.exchange.reuse", "false")
        .config("spark.sql.execution.reuseSubquery", "false")
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.sql.optimizer.excludedRules", ",".join(EXCLUDED_RULES))
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.sql.streaming.minBatchesToRetain", "20")
        .config("spark.python.worker.reuse", "true")
        # PySpark records the Python call site of every DataFrame function for error
        # messages, in extra JVM calls that more than double the cost of building the
        # job's plan from its Column expressions (docs/performance.md).
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # Executors (on a cluster: other processes, other machines) import the same code.
        .config("spark.executorEnv.PYTHONPATH", str(BASE_DIR))
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # The watermark eviction reads the whole state every batch: past RocksDB's default
        # 8 MiB block cache per partition, it decompressed most of it again each time
        # (docs/performance.md). The cache holds only blocks it has read, so a small
        # state costs no more memory.
        .config("spark.sql.streaming.stateStore.rocksdb.blockCacheSizeMB", "64")
        # The checkpoint is a local directory. Spark's default writer of it renames each
        # file through Hadoop's FileContext, which without Hadoop's native library starts
        # a `readlink` process for every path it renames, several per batch
        # (docs/performance.md); the FileSystem API renames with rename(2), atomic on a
        # local disk, and keeps the checksums.
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
    )
    if settings.real_time:
        # Real-time mode re-runs a failed long-running batch; version 2 gives each batch's
        # state its own checkpoint ids, so a re-run never reuses a failed batch's files
        # (Spark refuses version 1 for real-time mode). Fixed in the checkpoint.
        builder = builder.config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    for key, value in connector_conf(settings).items():
        builder = builder.config(key, value)
    for pair in filter(None, (p.strip() for p in settings.spark_conf.split(";"))):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"STREAMING_SPARK_CONF: expected key=value, got {pair!r}")
        builder = builder.config(key.strip(), value.strip())
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # With a 100 ms trigger a 200 ms batch is normal, not news: our own one-line progress
    # log reports every batch's duration and lag, so Spark's per-batch warning is noise.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        TRIGGER_EXECUTOR, jvm.org.apache.logging.log4j.Level.ERROR
    )
    return spark


def connector_conf(settings: Settings) -> dict[str, str]:
    """Spark's Kafka connector on the job's classpath (``spark.jars``: the driver serves
    them to executors, on a cluster too), and the local file system fix."""
    from jvm import hadoop, maven

    conf = {"spark.jars": ",".join(str(jar) for jar in maven.jars("spark-kafka"))}
    if settings.nio_local_fs:
        conf.update(hadoop.spark_conf())
    return conf


def source_frame(spark: Any, settings: Settings) -> Any:
    """The three source topics with the native Kafka source's columns."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", ",".join(settings.source_topics))
        .option("startingOffsets", settings.starting_offsets)
        .option("kafka.fetch.max.wait.ms", "5")
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    return reader.load().select("key", "value", "topic", "partition", "offset", "timestamp")


def sink(stream: Any, settings: Settings) -> Any:
    """The stream's writer: executor tasks of each micro-batch produce its rows.

    ``acks=all`` and idempotence are Kafka's client defaults, stated here as the other
    producers state them (runtime/kafka.py): set explicitly, a later option that
    conflicts with them fails the query instead of quietly turning them off, and a
    record is acknowledged only once ``min.insync.replicas`` brokers hold it."""
    writer = stream.writeStream.outputMode("update")
    return (
        writer.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
    )


def start_query(spark: Any, settings: Settings) -> Any:
    """Ensure the topics, then start the streaming query."""
    from runtime.kafka import ensure_topics

    for prefix in {settings.input_prefix, settings.output_prefix}:
        ensure_topics(
            list(Topic),
            config=replace(
                kafka_config(), bootstrap_servers=settings.bootstrap_servers, topic_prefix=prefix
            ),
        )
    Path(settings.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    check_checkpoint(settings.checkpoint_dir)
    stream = enrich.outputs(
        source_frame(spark, settings),
        input_prefix=settings.input_prefix,
        output_prefix=settings.output_prefix,
        retention=settings.retention,
    )
    if settings.real_time:
        check_task_slots(spark, settings)
    writer = (
        sink(stream, settings)
        .option("checkpointLocation", str(Path(settings.checkpoint_dir) / "spark"))
        .queryName("ordertrack_enrich")
    )
    return with_trigger(writer, settings).start()


def with_trigger(writer: Any, settings: Settings) -> Any:
    """The query's trigger: catch up and stop, real-time mode, or micro-batches."""
    if settings.available_now:
        return writer.trigger(availableNow=True)
    if settings.real_time:
        return writer.trigger(realTime=settings.real_time)
    return writer.trigger(processingTime=f"{settings.trigger_ms} milliseconds")


def check_task_slots(spark: Any, settings: Settings) -> None:
    """Refuse real-time mode without a task slot for every source partition plus every
    shuffle partition: its tasks run for the whole long-running batch, all at once, and
    a stage left waiting for a slot holds the others' output."""
    from runtime.kafka import admin

    config = replace(kafka_config(), bootstrap_servers=settings.bootstrap_servers)
    topics = admin(config).list_topics(timeout=10).topics
    source = sum(len(topics[t].partitions) for t in settings.source_topics if t in topics)
    needed = source + settings.shuffle_partitions
    slots = spark.sparkContext.defaultParallelism
    if slots < needed:
        raise RuntimeError(
            f"streaming: real-time mode needs {needed} task slots ({source} topic partitions "
            f"+ {settings.shuffle_partitions} shuffle partitions); the cluster has {slots}. "
            "Give the job more executor cores or unset STREAMING_REAL_TIME."
        )


def progress_line(progress: dict[str, Any]) -> str:
    """One log line per micro-batch: rows, where the time went, state size."""
    durations = progress.get("durationMs") or {}
    parts = [
        f"batch={progress['batchId']}",
        f"rows={progress['numInputRows']}",
        f"duration_ms={durations.get('triggerExecution', 0)}",
        f"add_batch_ms={durations.get('addBatch', 0)}",
        f"latest_offset_ms={durations.get('latestOffset', 0)}",
        f"planning_ms={durations.get('queryPlanning', 0)}",
        f"wal_ms={durations.get('walCommit', 0)}",
        f"commit_ms={durations.get('commitOffsets', 0)}",
    ]
    for op in progress.get("stateOperators") or []:
        parts += [
            f"state_rows={op.get('numRowsTotal')}",
            f"state_updated={op.get('numRowsUpdated')}",
            f"state_dropped_late={op.get('numRowsDroppedByWatermark')}",
            f"state_commit_ms={op.get('commitTimeMs')}",
            # Each batch, Spark scans the whole state for keys past the watermark: this
            # grows with the orders kept (STREAMING_ORDER_RETENTION), not with the batch.
            f"state_evict_ms={op.get('allRemovalsTimeMs')}",
        ]
    return "streaming: " + " ".join(parts)


def run(settings: Settings, stop: threading.Event | None = None) -> int:
    """Run until stopped (or until caught up, with ``available_now``); return an exit code."""
    stop = stop or threading.Event()
    try:
        check_checkpoint(settings.checkpoint_dir)
    except CheckpointError as exc:
        log.error("%s", exc)
        return 2
    for line in retention_losses(settings):
        log.warning("streaming: %s", line)
    spark = spark_session(settings)
    query = start_query(spark, settings)
    if not settings.available_now:
        serve_metrics("streaming")
    log.info(
        "streaming: started master=%s checkpoint=%s trigger=%s",
        settings.spark_master,
        settings.checkpoint_dir,
        "availableNow" if settings.available_now else f"{settings.trigger_ms}ms",
    )
    last_batch = -1
    ready = False
    reporter = PositionReporter(
        "stream", replace(kafka_config(), bootstrap_servers=settings.bootstrap_servers)
    )

    def drain(progresses: list[Any]) -> None:
        nonlocal last_batch, ready
        for progress in progresses:
            if progress["batchId"] <= last_batch:
                continue
            last_batch = progress["batchId"]
            try:
                metrics.record(progress)
            except Exception:  # noqa: BLE001 - metrics must never stop the job
                log.exception("streaming: could not record batch %s's metrics", last_batch)
            if progress["numInputRows"]:
                log.info("%s", progress_line(progress))
            reporter.report(source_positions(progress))
            if not ready:
                ready = True
                print(READY_LINE, flush=True)

    # Each look is a few calls into the JVM and one progress serialised to JSON; the
    # last 100 batches' (recentProgress) are read only when a batch was missed, since
    # reading them costs a hundred of each.
    recent = settings.progress == "recent"
    poll_seconds = 1.0 if recent else 0.25
    try:
        while not stop.is_set() and query.isActive:
            last = query.lastProgress
            if last is not None and last["batchId"] > last_batch:
                missed = last_batch >= 0 and last["batchId"] > last_batch + 1
                if recent or missed:
                    drain(query.recentProgress)
                else:
                    drain([last])
            stop.wait(poll_seconds)
        drain(query.recentProgress)
        if query.exception() is not None:
            log.error("streaming: query failed: %s", query.exception())
            if "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in str(query.exception()):
                log.error(
                    "streaming: checkpoint %s holds join state of another layout (this "
                    "release: %d); rebuild it from the topics with a new "
                    'STREAMING_CHECKPOINT_DIR (docs/operations.md, "Upgrades")',
                    settings.checkpoint_dir,
                    STATE_LAYOUT,
                )
            return 1
        if not ready and settings.available_now:
            print(READY_LINE, flush=True)  # nothing to do is also "caught up"
        return 0
    finally:
        reporter.close()
        if query.isActive:
            query.stop()


def source_positions(progress: dict[str, Any]) -> dict[str, dict[int, int]]:
    """The next offset of each source partition after this batch (its ``endOffset``):
    topic -> partition -> offset. Spark's Kafka source commits nothing to Kafka, so this
    is what pipeline health learns the job's position from (:mod:`runtime.positions`)."""
    out: dict[str, dict[int, int]] = {}
    for source in progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if not isinstance(end, dict):
            continue
        for topic, parts in end.items():
            if isinstance(parts, dict):
                out[topic] = {int(p): int(o) for p, o in parts.items()}
    return out


def checkpoint_positions(checkpoint_dir: str | Path) -> dict[str, dict[int, int]]:
    """Where the checkpoint resumes each source partition: the end offsets of its last
    committed batch (Spark's offset log: a version line, the batch's metadata, then one
    JSON line per source); {} before the first commit."""
    spark_dir = Path(checkpoint_dir) / "spark"
    commits = [int(p.name) for p in (spark_dir / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return {}
    try:
        lines = (spark_dir / "offsets" / str(max(commits))).read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, dict[int, int]] = {}
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        for topic, parts in source.items() if isinstance(source, dict) else ():
            out[topic] = {int(p): int(o) for p, o in parts.items()}
    return out


def retention_losses(settings: Settings) -> list[str]:
    """What Kafka's retention deleted before the job read it (a stop longer than the
    topics' retention): one line per partition. With ``STREAMING_FAIL_ON_DATA_LOSS``
    (production's default) the query then fails and this says why; ``make run`` skips
    them and says what was skipped."""
    positions = checkpoint_positions(settings.checkpoint_dir)
    if not positions:
        return []
    from runtime.kafka import consumer, start_offsets

    config = replace(kafka_config(), bootstrap_servers=settings.bootstrap_servers)
    cons = consumer(config)
    lines = []
    try:
        for topic, parts in sorted(positions.items()):
            starts = start_offsets(cons, topic, parts)
            for partition, position in sorted(parts.items()):
                if starts[partition] > position:
                    lines.append(
                        f"retention deleted {starts[partition] - position} records of "
                        f"{topic}[{partition}] (offsets {position}-{starts[partition] - 1}) "
                        "before this job read them"
                        + ("" if settings.fail_on_data_loss else "; skipping them")
                    )
    finally:
        cons.close()
    return lines

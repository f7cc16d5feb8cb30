"""The streaming job: three source topics in, enriched topics out, state in Spark.

Pipeline::

    orders, order_statuses, delivery_locations        (Spark's Kafka source, on executors)
      -> streaming.enrich.outputs: parse, validate, join by order (RocksDB state store)
      -> Spark's Kafka sink: the micro-batch's executor tasks produce (topic, key, value)
      -> orders_enriched, delivery_statuses, order_items_enriched, dead_letters

Every mode runs this code on Spark's own Kafka connector (its jars come from
``jvm/spark-kafka/pom.xml``); local runs and production differ only in the master URL
(``SPARK_MASTER``) and the addresses. The session is built by :mod:`streaming.session`,
the checkpoint checked by :mod:`streaming.checkpoint`, and each batch's progress
followed by :mod:`streaming.progress`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from contract.events import Topic
from runtime.conf import kafka_config
from runtime.kafka.clients import COMPRESSION
from runtime.metrics import serve_metrics

from . import enrich, progress
from .checkpoint import CheckpointError, check_checkpoint, retention_losses
from .session import spark_session
from .settings import STATE_LAYOUT, Settings

log = logging.getLogger("streaming")


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
    producers state them (runtime/kafka/): set explicitly, a later option that
    conflicts with them fails the query instead of quietly turning them off, and a
    record is acknowledged only once ``min.insync.replicas`` brokers hold it.

    Its batches are compressed as our producers' are (zstd, with their 5 ms linger so a
    batch holds many records): an enriched record repeats the whole order for each GPS
    point, and uncompressed the sink wrote about 750 of the 840 bytes Kafka stored per
    point (issue 70; docs/performance.md, "Kafka bytes per GPS point"). The broker keeps
    the producer's compression (``compression.type=producer``) and Pinot's consumer reads
    it."""
    writer = stream.writeStream.outputMode("update")
    return (
        writer.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        .option("kafka.compression.type", COMPRESSION)
        .option("kafka.linger.ms", "5")
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
    writer = (
        sink(stream, settings)
        .option("checkpointLocation", str(Path(settings.checkpoint_dir) / "spark"))
        .queryName("ordertrack_enrich")
    )
    return with_trigger(writer, settings).start()


def with_trigger(writer: Any, settings: Settings) -> Any:
    """The query's trigger: catch up and stop, or micro-batches."""
    if settings.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{settings.trigger_ms} milliseconds")


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
    try:
        ready = progress.follow(query, settings, stop)
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
            print(progress.READY_LINE, flush=True)  # nothing to do is also "caught up"
        return 0
    finally:
        if query.isActive:
            query.stop()

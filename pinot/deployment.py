"""What a deployment sets in a table's files, and checks before any call to Pinot.

The files in ``pinot/tables/`` are the only copy of the tables; the stream's broker list,
the physical topic, the consumer factory, the topic's partition count, the replicas and
(locally) the retention are filled in here (:func:`table_config`), so every deployment
runs the same tables.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from contract.events import topic_name
from contract.load import CAPACITY_LEVELS, ENRICHED_PER_POINT, Load
from pinot.definitions import TableDef
from runtime.conf import env_int, kafka_config

#: The Pinot version run locally and by compose (jvm/pinot/pom.xml, docker-compose.yml).
PINOT_VERSION = "0.11.0"
#: Pinot 0.11's Kafka 2.x stream plugin (kafka-clients 2.8.1), the only Kafka plugin of
#: that version; it consumes from Apache Kafka 4.x brokers (docs/pinot.md).
CONSUMER_FACTORY = "org.apache.pinot.plugin.stream.kafka20.KafkaConsumerFactory"

_FLUSH_TIME = "realtime.segment.flush.threshold.time"
_FLUSH_ROWS = "realtime.segment.flush.threshold.rows"
#: The share of Kafka's byte cap a consuming segment may span at the highest capacity level:
#: the rest covers Kafka deleting whole log segments, the commit's own time and bursts.
CAP_SHARE = 0.5


class LoaderError(RuntimeError):
    """A table cannot be created or changed as its files say: start-up stops."""


@dataclass(frozen=True)
class Settings:
    """Where the tables are created and what the deployment sets in their configs."""

    controller_url: str
    kafka_bootstrap: str = field(default_factory=lambda: kafka_config().bootstrap_servers)
    topic_prefix: str = field(default_factory=lambda: kafka_config().topic_prefix)
    #: Kafka's retention of the topics: a table's flush time must stay below it.
    kafka_retention_ms: int = field(default_factory=lambda: kafka_config().retention_ms)
    #: Kafka's byte cap per partition (-1: none): a consuming segment must commit before
    #: the cap deletes its start, at the highest level of load (:func:`check_flush_time`).
    kafka_retention_bytes: int = field(default_factory=lambda: kafka_config().retention_bytes)
    #: The topic's partitions, which a table partitioned by order_id must state: None asks
    #: Kafka for each table's topic (:func:`pinot.loader.load`), the only count that can be trusted.
    kafka_partitions: int | None = None
    #: The tables' retention in days; None keeps the files' (production).
    retention_days: int | None = None
    #: Replicas of each partition's segments (``segmentsConfig.replicasPerPartition``), at
    #: most the servers there are; None keeps the files' (one).
    replication: int | None = field(default_factory=lambda: env_int("PINOT_REPLICATION", 0) or None)


def duration_ms(value: str) -> int:
    """Pinot's period strings (``6h``, ``30m``, ``1d``, ``90s``) or plain milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([dhms]?)\s*", str(value).lower())
    if not match:
        raise LoaderError(f"{_FLUSH_TIME} {value!r} is not a period like 6h, 30m or 1d")
    unit = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "": 1}[match.group(2)]
    return int(match.group(1)) * unit


def int_range_filter(schema: dict[str, Any]) -> str | None:
    """The ingestion filter that drops a record whose INT column's value is past INT, or
    missing (the filter fails on it, and Pinot drops the record as an error): Pinot 0.11
    would otherwise store such a value wrapped around (3,000,000,000 as -1,294,967,296)
    with no error. ``between`` is exclusive; derived from the schema, so a new INT
    column is guarded too (tests/integration/pinot/test_real_pinot.py)."""
    columns = [
        spec["name"]
        for kind in ("dimensionFieldSpecs", "metricFieldSpecs")
        for spec in schema.get(kind, [])
        if spec["dataType"] == "INT" and spec.get("singleValueField", True)
    ]
    if not columns:
        return None
    inside = [f"between({name}, {-(2**31) - 1}, {2**31})" for name in columns]
    return f"not({inside[0]})" if len(inside) == 1 else f"not(and({', '.join(inside)}))"


def table_config(table: TableDef, settings: Settings) -> dict[str, Any]:
    """The table's file with the deployment's broker, topic, consumer factory, retention,
    the topic's partition count, and the INT range guard of its schema."""
    config = copy.deepcopy(table.config)
    stream = config["tableIndexConfig"]["streamConfigs"]
    stream["stream.kafka.broker.list"] = settings.kafka_bootstrap
    stream["stream.kafka.topic.name"] = topic_name(table.topic, settings.topic_prefix)
    stream["stream.kafka.consumer.factory.class.name"] = CONSUMER_FACTORY
    partitioning = config["tableIndexConfig"].get("segmentPartitionConfig")
    for spec in (partitioning or {}).get("columnPartitionMap", {}).values():
        if settings.kafka_partitions is None:
            raise LoaderError(
                f"{table.name}: partitioned by order_id, but its topic's partitions are unknown"
            )
        # Pinot skips a segment when the partition it computes for a point read differs
        # from the segment's Kafka partition: a wrong count would make reads miss rows.
        spec["numPartitions"] = settings.kafka_partitions
    guard = int_range_filter(table.schema)
    if guard is not None:
        ingestion = config.setdefault("ingestionConfig", {})
        ingestion["filterConfig"] = {"filterFunction": guard}
    if settings.replication is not None:
        # Every server consuming a partition holds it all (Pinot's realtime assignment puts
        # a partition on one server per replica), as upsert and strictReplicaGroup need.
        config["segmentsConfig"]["replicasPerPartition"] = str(settings.replication)
    if settings.retention_days is not None:
        config["segmentsConfig"]["retentionTimeUnit"] = "DAYS"
        config["segmentsConfig"]["retentionTimeValue"] = str(settings.retention_days)
    check_flush_time(table, settings)
    return config


def check_flush_time(table: TableDef, settings: Settings) -> None:
    """LoaderError when a consuming segment can outlive the Kafka records it would be
    rebuilt from: its flush time not below Kafka's retention, or its flush thresholds (time
    or rows) letting it span more than :data:`CAP_SHARE` of the byte cap at the highest
    capacity level (:func:`segment_span_bytes`). A server restarted after a crash re-reads
    its consuming segments from Kafka; from deleted offsets it would lose orders' latest
    state (docs/pinot.md, "Graceful stop")."""
    stream = table.config["tableIndexConfig"]["streamConfigs"]
    flush = stream.get(_FLUSH_TIME, "6h")
    if duration_ms(flush) >= settings.kafka_retention_ms:
        raise LoaderError(
            f"{table.name}: {_FLUSH_TIME} {flush!r} is not below Kafka's "
            f"retention ({settings.kafka_retention_ms} ms, KAFKA_RETENTION_MS): a server "
            "restarted later would re-consume from deleted offsets and lose orders' latest "
            "state. Lower the flush time in pinot/tables/ or raise the retention."
        )
    if settings.kafka_retention_bytes < 0:
        return
    partitions = settings.kafka_partitions or kafka_config().partitions
    span = segment_span_bytes(table, partitions)
    if span > CAP_SHARE * settings.kafka_retention_bytes:
        top = Load(max(CAPACITY_LEVELS))
        raise LoaderError(
            f"{table.name}: at {top.describe()} a consuming segment spans up to "
            f"{span / 1_048_576:,.0f} MiB of a partition of {table.topic.value} before "
            f"{_FLUSH_TIME} {flush!r} or {_FLUSH_ROWS} {stream.get(_FLUSH_ROWS, '0')} "
            f"commits it, over {CAP_SHARE:.0%} of Kafka's byte cap "
            f"({settings.kafka_retention_bytes / 1_048_576:,.0f} MiB, KAFKA_RETENTION_BYTES): "
            "a server restarted after a crash would re-consume from deleted offsets and "
            "lose orders' latest state. Lower the thresholds in pinot/tables/ or raise the cap."
        )


def segment_span_bytes(table: TableDef, partitions: int) -> float:
    """Kafka bytes of one partition a consuming segment of ``table`` can span at the
    highest capacity level: it commits at its flush time or rows, whichever comes first
    (Pinot 0.11 divides the rows among the partitions a server consumes, so the table's
    figure is an upper bound). No rows threshold (0): the time alone."""
    stream = table.config["tableIndexConfig"]["streamConfigs"]
    records_per_point, record_bytes = ENRICHED_PER_POINT[table.topic.value]
    records_per_s = Load(max(CAPACITY_LEVELS)).points_per_second * records_per_point / partitions
    seconds = duration_ms(stream.get(_FLUSH_TIME, "6h")) / 1000
    rows = int(stream.get(_FLUSH_ROWS, "0") or 0)
    if rows > 0:
        seconds = min(seconds, rows / records_per_s)
    return seconds * records_per_s * record_bytes

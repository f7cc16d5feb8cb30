"""Creates or updates Pinot's schemas and REALTIME tables from ``pinot/tables/``.

One loader for ``make run`` and the tests (localrun/pinot.py) and for compose's
``pinot-init`` (``python -m pinot.loader http://pinot-controller:9000``), so the files
are the only copy of the tables. What differs by deployment is set here, never in a
second copy of the files: the stream's broker list, the physical topic names
(``KAFKA_TOPIC_PREFIX``), the consumer factory of the Pinot version run, the topics'
partition count (read from Kafka), the replicas of each partition (``PINOT_REPLICATION``: 2
on the cluster of docker-compose.cluster.yml, one copy on each of its two servers), and
(locally) the table retention.

On every start a changed file is applied where Pinot allows it (the schema or table is
updated, then its segments reloaded). A change Pinot cannot apply to a live table (a
column dropped or retyped, another primary key, upsert/dedup settings, the topic) stops
start-up with the field named: it needs a new table, never a silent mismatch. A field
that Pinot did not keep (a setting of another Pinot version, which its JSON reader
ignores) also stops start-up.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from contract.events import topic_name
from pinot.definitions import TableDef, load_tables
from runtime.conf import env_int, env_str, kafka_config

#: The Pinot version run locally and by compose (jvm/pinot/pom.xml, docker-compose.yml).
PINOT_VERSION = "0.11.0"
#: Pinot 0.11's Kafka 2.x stream plugin (kafka-clients 2.8.1), the only Kafka plugin of
#: that version; it consumes from Apache Kafka 4.x brokers (docs/pinot.md).
CONSUMER_FACTORY = "org.apache.pinot.plugin.stream.kafka20.KafkaConsumerFactory"

_FLUSH_TIME = "realtime.segment.flush.threshold.time"

#: Settings of a live table that Pinot keeps but cannot apply to segments it holds.
_FIXED_TABLE_PATHS = (
    ("tableType",),
    ("segmentsConfig", "timeColumnName"),
    ("segmentsConfig", "schemaName"),
    ("upsertConfig",),
    ("dedupConfig",),
    ("routing", "instanceSelectorType"),
    ("tableIndexConfig", "streamConfigs", "streamType"),
    ("tableIndexConfig", "streamConfigs", "stream.kafka.topic.name"),
    ("tableIndexConfig", "streamConfigs", "stream.kafka.consumer.type"),
)


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
    #: The topic's partitions, which a table partitioned by order_id must state: None asks
    #: Kafka for each table's topic (:func:`load`), the only count that can be trusted.
    kafka_partitions: int | None = None
    #: The tables' retention in days; None keeps the files' (production).
    retention_days: int | None = None
    #: Replicas of each partition's segments (``segmentsConfig.replicasPerPartition``), at
    #: most the servers there are; None keeps the files' (one).
    replication: int | None = field(default_factory=lambda: env_int("PINOT_REPLICATION", 0) or None)


@dataclass(frozen=True)
class Outcome:
    """What the loader did with one table."""

    table: str
    topic: str
    schema: str  # created | updated | unchanged
    config: str  # created | updated | unchanged

    def __str__(self) -> str:
        return f"{self.table} <- {self.topic}: table {self.config}, schema {self.schema}"


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
    column is guarded too (tests/test_real_pinot.py)."""
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
    """LoaderError when the table's flush time is not below Kafka's retention: a server
    restarted later would re-consume from deleted offsets and lose orders' latest state."""
    stream = table.config["tableIndexConfig"]["streamConfigs"]
    flush = stream.get(_FLUSH_TIME, "6h")
    if duration_ms(flush) >= settings.kafka_retention_ms:
        raise LoaderError(
            f"{table.name}: {_FLUSH_TIME} {flush!r} is not below Kafka's "
            f"retention ({settings.kafka_retention_ms} ms, KAFKA_RETENTION_MS): a server "
            "restarted later would re-consume from deleted offsets and lose orders' latest "
            "state. Lower the flush time in pinot/tables/ or raise the retention."
        )


def _leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    else:
        yield path, value


_MISSING = object()


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _covers(stored: Any, wanted: Any) -> bool:
    """Whether ``stored`` holds every setting of ``wanted``, as Pinot stores it: with its
    defaults added, and numbers or booleans possibly as strings."""
    if isinstance(wanted, dict):
        return isinstance(stored, dict) and all(
            key in stored and _covers(stored[key], item) for key, item in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(wanted)
            and all(map(_covers, stored, wanted))
        )
    return wanted == stored or str(wanted).lower() == str(stored).lower()


def config_differences(wanted: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    """The dotted paths of ``wanted``'s settings that ``stored`` lacks or holds otherwise."""
    stored = dict(stored)
    if isinstance(stored.get("tableName"), str):  # Pinot stores "<table>_REALTIME"
        stored["tableName"] = stored["tableName"].removesuffix("_REALTIME")
    return [
        ".".join(path)
        for path, value in _leaves(wanted)
        if (held := _at(stored, path)) is _MISSING or not _covers(held, value)
    ]


def _moved(wanted: dict[str, Any], stored: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether the setting at ``path`` differs (settings Pinot adds as defaults do not count)."""
    want, held = _at(wanted, path), _at(stored, path)
    if want is _MISSING:
        return held is not _MISSING and held not in (None, {})
    if held is _MISSING:
        return True
    return bool(config_differences({"x": want}, {"x": held}))


def _fields(schema: dict[str, Any]) -> dict[str, tuple[str, str]]:
    out = {}
    for kind in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs"):
        for spec in schema.get(kind, []):
            out[spec["name"]] = (kind, spec["dataType"])
    return out


def schema_incompatibilities(wanted: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    """Why Pinot cannot move a live table from ``stored`` to ``wanted`` (empty: it can)."""
    problems = []
    old, new = _fields(stored), _fields(wanted)
    for name, (kind, data_type) in old.items():
        if name not in new:
            problems.append(f"column {name!r} would be dropped")
        elif new[name] != (kind, data_type):
            problems.append(f"column {name!r} changes from {kind} {data_type} to {new[name]}")
    if (stored.get("primaryKeyColumns") or []) != (wanted.get("primaryKeyColumns") or []):
        problems.append("primaryKeyColumns change")
    return problems


class Controller:
    """The few calls of Pinot's controller REST API the loader needs."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        response = self.client.request(method, path, json=body, params=params or None)
        if response.status_code == 404 and method == "GET":
            return None
        if response.status_code >= 400:
            raise LoaderError(
                f"Pinot controller: {method} {path} answered {response.status_code}: "
                f"{response.text[:800]}"
            )
        try:
            return response.json()
        except json.JSONDecodeError:
            return response.text

    def schema(self, name: str) -> dict[str, Any] | None:
        return self.call("GET", f"/schemas/{name}")

    def table(self, name: str) -> dict[str, Any] | None:
        found = self.call("GET", f"/tables/{name}", type="realtime")
        return (found or {}).get("REALTIME")

    def servers(self) -> list[str]:
        """The server instances the cluster knows (``Server_<host>_<port>``)."""
        instances = (self.call("GET", "/instances") or {}).get("instances", [])
        return [name for name in instances if name.startswith("Server_")]


def load_table(controller: Controller, table: TableDef, settings: Settings) -> Outcome:
    """Create, update or keep one table's schema and config; raise on what cannot change."""
    config = table_config(table, settings)
    topic = config["tableIndexConfig"]["streamConfigs"]["stream.kafka.topic.name"]
    stored_schema = controller.schema(table.name)
    stored_config = controller.table(table.name)
    schema_state = config_state = "unchanged"

    if stored_schema is None:
        controller.call("POST", "/schemas", table.schema)
        schema_state = "created"
    elif config_differences(table.schema, stored_schema):
        problems = schema_incompatibilities(table.schema, stored_schema)
        if problems:
            raise LoaderError(
                f"{table.name}: schema change Pinot cannot apply to a live table: "
                + "; ".join(problems)
                + " (a new table is needed: docs/pinot.md)"
            )
        controller.call("PUT", f"/schemas/{table.name}", table.schema, reload="false")
        schema_state = "updated"

    if stored_config is None:
        controller.call("POST", "/tables", config)
        config_state = "created"
    else:
        changed = config_differences(config, stored_config)
        fixed = [".".join(p) for p in _FIXED_TABLE_PATHS if _moved(config, stored_config, p)]
        if fixed:
            raise LoaderError(
                f"{table.name}: change Pinot cannot apply to a live table: {', '.join(fixed)} "
                "(a new table is needed: docs/pinot.md)"
            )
        if changed:
            controller.call("PUT", f"/tables/{table.name}", config)
            config_state = "updated"

    kept = controller.table(table.name) or {}
    ignored = config_differences(config, kept)
    if ignored:
        raise LoaderError(
            f"{table.name}: Pinot {PINOT_VERSION} did not keep {', '.join(ignored)} "
            "(a setting of another Pinot version?)"
        )
    kept_schema = controller.schema(table.name) or {}
    ignored = config_differences(table.schema, kept_schema)
    if ignored:
        raise LoaderError(f"{table.name}: Pinot did not keep schema {', '.join(ignored)}")
    if "updated" in (schema_state, config_state) and stored_config is not None:
        controller.call("POST", f"/segments/{table.name}/reload", type="REALTIME")
    if stored_config is not None and _moved(
        config, stored_config, ("segmentsConfig", "replicasPerPartition")
    ):
        # A new replica count applies to new segments only: move the held ones too (no
        # downtime, the consuming ones included), or a lost server would take them along.
        controller.call(
            "POST", f"/tables/{table.name}/rebalance", type="REALTIME", dryRun="false",
            includeConsuming="true", downtime="false", minAvailableReplicas="1",
        )  # fmt: skip
    return Outcome(table.name, topic, schema_state, config_state)


def topic_partitions(settings: Settings, tables: Iterable[TableDef]) -> dict[str, int]:
    """Each table's topic's partition count, as Kafka has it (the topics exist before the
    tables: Pinot cannot create a table on a missing topic either)."""
    from runtime.kafka import consumer, partitions_of

    cons = consumer(**{"bootstrap.servers": settings.kafka_bootstrap})
    try:
        return {
            t.name: len(partitions_of(cons, topic_name(t.topic, settings.topic_prefix)))
            for t in tables
        }
    except Exception as exc:
        raise LoaderError(f"cannot read the topics' partitions from Kafka: {exc}") from exc
    finally:
        cons.close()


def load(settings: Settings, tables: dict[str, TableDef] | None = None) -> list[Outcome]:
    """Apply every table of ``pinot/tables/`` (checked first, all of them, before any call)."""
    tables = tables if tables is not None else load_tables()
    each = {name: settings for name in tables}
    if settings.kafka_partitions is None:
        counts = topic_partitions(settings, tables.values())
        each = {name: replace(settings, kafka_partitions=n) for name, n in counts.items()}
    for name, table in tables.items():
        table_config(table, each[name])  # refuses a flush time past Kafka's retention up front
    controller = Controller(settings.controller_url)
    try:
        if settings.replication is not None:
            servers = controller.servers()
            if len(servers) < settings.replication:
                raise LoaderError(
                    f"PINOT_REPLICATION={settings.replication} needs as many servers, and the "
                    f"cluster has {len(servers)} ({', '.join(servers) or 'none'}): start them "
                    "first, or Pinot would put fewer copies of each partition than asked"
                )
        return [load_table(controller, table, each[name]) for name, table in tables.items()]
    finally:
        controller.close()


def wait_queryable(broker_url: str, tables: list[str], timeout: float = 60.0) -> None:
    """Wait until each table answers ``COUNT(*)`` through the broker from a server.

    A new table, or one whose segments are coming online, answers with ``exceptions``, or
    with no server queried and no result at all (the broker knows of no server holding
    its segments yet): readiness means every table answers cleanly from a server once."""
    deadline = time.monotonic() + timeout
    pending = list(tables)
    last = ""
    with httpx.Client(base_url=broker_url.rstrip("/"), timeout=5.0) as client:
        while pending:
            name = pending[0]
            try:
                answer = client.post("/query/sql", json={"sql": f"SELECT COUNT(*) FROM {name}"})
                body = answer.json()
                last = json.dumps(body.get("exceptions") or "")[:300]
                if (
                    answer.status_code == 200
                    and not body.get("exceptions")
                    and body.get("numServersQueried", 0) > 0
                ):
                    pending.pop(0)
                    continue
            except (httpx.HTTPError, ValueError) as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise LoaderError(f"Pinot table {name} not queryable after {timeout:.0f} s: {last}")
            time.sleep(0.25)


def main(argv: list[str]) -> int:
    """``python -m pinot.loader [CONTROLLER_URL]``: compose's pinot-init, or by hand."""
    url = argv[0] if argv else env_str("PINOT_CONTROLLER_URL", "http://127.0.0.1:9000")
    retention = env_int("PINOT_RETENTION_DAYS", 0)
    settings = Settings(controller_url=url, retention_days=retention or None)
    try:
        for outcome in load(settings):
            print(f"pinot-init: {outcome}", flush=True)
    except LoaderError as exc:
        print(f"pinot-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

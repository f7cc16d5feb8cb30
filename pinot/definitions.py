"""Pinot table definitions: the schema and table config files under ``pinot/tables/``.

These JSON files are what a production Pinot is created from (``AddTable -schemaFile
... -tableConfigFile ...``); ``make run`` and the tests load the very same files into
their local Pinot, so no run can drift from production on column names, primary keys,
comparison columns or topics. :func:`validate` checks the rules Pinot (and this
project's event contract) impose, and the loader refuses to load on any violation.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.events import EVENT_TYPES, Topic

TABLES_DIR = Path(__file__).resolve().parent / "tables"

#: Pinot data types the local server can store and return.
SUPPORTED_TYPES = {"INT", "LONG", "FLOAT", "DOUBLE", "STRING", "JSON", "BYTES", "BOOLEAN"}

#: Pinot's default null values (null handling disabled): what a missing field becomes.
_DIMENSION_DEFAULTS: dict[str, Any] = {
    "INT": -(2**31),
    "LONG": -(2**63),
    "FLOAT": float("-inf"),
    "DOUBLE": float("-inf"),
    "STRING": "null",
    "JSON": "null",
    "BYTES": b"",
    "BOOLEAN": 0,
}
_METRIC_DEFAULTS: dict[str, Any] = {"INT": 0, "LONG": 0, "FLOAT": 0.0, "DOUBLE": 0.0, "BYTES": b""}

#: The only ingestion transform the local server evaluates: ``stPoint(x, y, 1)``.
_ST_POINT = re.compile(r"^\s*stPoint\(\s*(\w+)\s*,\s*(\w+)\s*(,\s*1\s*)?\)\s*$", re.I)


class DefinitionError(ValueError):
    """A schema or table config breaks a Pinot or event-contract rule."""


@dataclass(frozen=True)
class Column:
    """One column of a Pinot schema: its name, Pinot type, field kind and null default."""

    name: str
    data_type: str
    kind: str  # dimension | metric | datetime
    default: Any


@dataclass(frozen=True)
class TableDef:
    """One table: its schema columns and the table-config settings that matter."""

    name: str
    topic: Topic
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    time_column: str
    upsert: bool
    comparison_column: str | None
    dedup: bool
    #: column -> (x field, y field) for ``stPoint`` transforms (geometry points).
    points: dict[str, tuple[str, str]]
    schema: dict[str, Any] = dataclasses.field(repr=False)
    config: dict[str, Any] = dataclasses.field(repr=False)
    #: The point columns filled by ``stPoint(x, y, 1)``: geographies (the H3 index needs one).
    geography_points: frozenset[str] = frozenset()

    def column(self, name: str) -> Column | None:
        for col in self.columns:
            if col.name == name:
                return col
        return None


def _columns(schema: dict[str, Any]) -> list[Column]:
    cols = []
    for key, kind in (
        ("dimensionFieldSpecs", "dimension"),
        ("metricFieldSpecs", "metric"),
        ("dateTimeFieldSpecs", "datetime"),
    ):
        for spec in schema.get(key, []):
            data_type = spec["dataType"]
            if "defaultNullValue" in spec:
                default = spec["defaultNullValue"]
            elif kind == "metric":
                default = _METRIC_DEFAULTS.get(data_type)
            else:
                default = _DIMENSION_DEFAULTS.get(data_type)
            cols.append(Column(spec["name"], data_type, kind, default))
    return cols


def validate(schema: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Every rule violation of one table's files (empty when the table is valid)."""
    errors: list[str] = []
    name = config.get("tableName")
    cols = {c.name: c for c in _columns(schema)}
    if schema.get("schemaName") != name:
        errors.append(f"schemaName {schema.get('schemaName')!r} != tableName {name!r}")
    if config.get("segmentsConfig", {}).get("schemaName") != name:
        errors.append("segmentsConfig.schemaName must equal tableName")
    if config.get("tableType") != "REALTIME":
        errors.append("tableType must be REALTIME (tables are fed by Kafka)")
    for col in cols.values():
        if col.data_type not in SUPPORTED_TYPES:
            errors.append(f"column {col.name}: unsupported dataType {col.data_type}")
    time_col = config.get("segmentsConfig", {}).get("timeColumnName")
    if time_col not in cols or cols[time_col].kind != "datetime":
        errors.append(f"timeColumnName {time_col!r} is not a dateTimeFieldSpec")

    stream = config.get("tableIndexConfig", {}).get("streamConfigs", {})
    topic = stream.get("stream.kafka.topic.name")
    if topic not in Topic._value2member_map_:
        errors.append(f"stream topic {topic!r} is not a topic of the event contract")
        event_fields: set[str] = set()
    else:
        event_fields = {f.name for f in dataclasses.fields(EVENT_TYPES[Topic(topic)])}
    if stream.get("stream.kafka.consumer.type", "lowLevel") != "lowLevel":
        errors.append("upsert/dedup need the low-level (partition) consumer")

    transforms = config.get("ingestionConfig", {}).get("transformConfigs", [])
    derived = set()
    for t in transforms:
        match = _ST_POINT.match(t.get("transformFunction", ""))
        if not match:
            errors.append(f"transform {t!r}: only stPoint(x, y, 1) is supported")
            continue
        derived.add(t["columnName"])
        for arg in match.groups()[:2]:
            if arg not in event_fields:
                errors.append(f"transform of {t['columnName']}: {arg!r} is not an event field")
    for col in cols:
        if event_fields and col not in event_fields and col not in derived:
            errors.append(f"column {col!r} is neither an event field nor a transform output")

    pk = schema.get("primaryKeyColumns") or []
    upsert = config.get("upsertConfig")
    dedup = config.get("dedupConfig", {}).get("dedupEnabled", False)
    if upsert and dedup:
        errors.append("a table cannot have both upsert and dedup")
    if upsert or dedup:
        if not pk:
            errors.append("upsert/dedup tables must name primaryKeyColumns")
        for col in pk:
            if col not in cols:
                errors.append(f"primary key column {col!r} is not in the schema")
        if "order_id" not in pk:
            errors.append("the primary key must include order_id (the topics are keyed by it)")
        if config.get("routing", {}).get("instanceSelectorType") != "strictReplicaGroup":
            errors.append("upsert/dedup need routing.instanceSelectorType strictReplicaGroup")
    errors += _partitioning_errors(config)
    if upsert:
        if upsert.get("mode", "FULL") != "FULL":
            errors.append("only FULL upsert is used")
        comparison = upsert.get("comparisonColumns") or (
            [upsert["comparisonColumn"]] if "comparisonColumn" in upsert else []
        )
        if len(comparison) != 1:
            errors.append("upsert tables must name exactly one comparison column")
        elif comparison[0] not in cols:
            errors.append(f"comparison column {comparison[0]!r} is not in the schema")
        if upsert.get("dropOutOfOrderRecord"):
            errors.append("dropOutOfOrderRecord would hide history from skipUpsert queries")
    return errors


def _partitioning_errors(config: dict[str, Any]) -> list[str]:
    """Pinot may skip a segment for a point read only if it places rows exactly as Kafka
    does: every topic is keyed by ``str(order_id)`` and partitioned by murmur2 (the Java
    client's default, and ``murmur2_random`` in ours), which is Pinot's ``Murmur``
    function over the column's string value. Any other column or function would make
    reads silently miss rows, so the files may not say so."""
    partitioning = config.get("tableIndexConfig", {}).get("segmentPartitionConfig")
    pruners = config.get("routing", {}).get("segmentPrunerTypes") or []
    errors = []
    if partitioning is None:
        if "partition" in pruners:
            errors.append("routing prunes by partition without a segmentPartitionConfig")
        return errors
    columns = partitioning.get("columnPartitionMap") or {}
    if list(columns) != ["order_id"]:
        errors.append("segmentPartitionConfig may partition by order_id only (the topics' key)")
    for column, spec in columns.items():
        if spec.get("functionName") != "Murmur":
            errors.append(f"partition function of {column}: Murmur (Kafka's murmur2) only")
    if "partition" not in pruners:
        errors.append("a segmentPartitionConfig is of use only with the partition pruner")
    return errors


def load_table(directory: Path) -> TableDef:
    """Read and validate one ``<table>/schema.json`` + ``table.json`` pair."""
    schema = json.loads((directory / "schema.json").read_text())
    config = json.loads((directory / "table.json").read_text())
    errors = validate(schema, config)
    if errors:
        raise DefinitionError(f"{directory.name}: " + "; ".join(errors))
    upsert = config.get("upsertConfig")
    comparison = None
    if upsert:
        comparison = (upsert.get("comparisonColumns") or [upsert.get("comparisonColumn")])[0]
    points = {}
    geography = set()
    for t in config.get("ingestionConfig", {}).get("transformConfigs", []):
        match = _ST_POINT.match(t["transformFunction"])
        assert match is not None  # validated above
        points[t["columnName"]] = (match.group(1), match.group(2))
        if match.group(3):
            geography.add(t["columnName"])
    return TableDef(
        name=config["tableName"],
        topic=Topic(config["tableIndexConfig"]["streamConfigs"]["stream.kafka.topic.name"]),
        columns=tuple(_columns(schema)),
        primary_key=tuple(schema.get("primaryKeyColumns") or ()),
        time_column=config["segmentsConfig"]["timeColumnName"],
        upsert=bool(upsert),
        comparison_column=comparison,
        dedup=bool(config.get("dedupConfig", {}).get("dedupEnabled", False)),
        points=points,
        geography_points=frozenset(geography),
        schema=schema,
        config=config,
    )


def load_tables(root: Path = TABLES_DIR) -> dict[str, TableDef]:
    """All table definitions under ``root``, keyed by table name."""
    tables = {}
    for directory in sorted(p for p in root.iterdir() if (p / "table.json").exists()):
        table = load_table(directory)
        tables[table.name] = table
    return tables

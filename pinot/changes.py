"""What differs between a table's files and what Pinot holds, and which differences
Pinot cannot apply to a live table (those need a new table, never a silent mismatch)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


def moved(wanted: dict[str, Any], stored: dict[str, Any], path: tuple[str, ...]) -> bool:
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


def unchangeable(wanted: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    """The dotted paths of settings Pinot keeps but cannot apply that ``wanted`` changes."""
    return [".".join(path) for path in _FIXED_TABLE_PATHS if moved(wanted, stored, path)]

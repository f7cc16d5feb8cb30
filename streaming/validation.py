"""The contract as Spark sees it: schemas and validation, generated from the rule table.

The Spark schemas (:func:`struct_type`), the checks, their order and their reasons all
come from the dataclasses and rules of :mod:`contract.events` and :mod:`contract.rules`,
so a field or bound added there is parsed and validated here. ``try_parse_json`` gives
each value a VARIANT, whose per-field JSON types the checks read; a message that fails
is named ``invalid <field>: <reason>``, as ``parse_event`` names it.
:mod:`streaming.enrich` puts these expressions into the plan.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from pyspark.sql import types as T

from contract.events import (
    SCHEMA_VERSION,
    DeliveryLocation,
    Event,
    OrderPlaced,
    OrderStatusChanged,
    Topic,
)
from contract.rules import INT64_MAX, MAX_CLOCK_SKEW_MS, rules_of

SOURCE_EVENTS: dict[Topic, type[Event]] = {
    Topic.ORDERS: OrderPlaced,
    Topic.ORDER_STATUSES: OrderStatusChanged,
    Topic.DELIVERY_LOCATIONS: DeliveryLocation,
}


# ----------------------------------------------------------------------------- schemas


def fields_of(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, type, optional) of each contract field, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        annotation, optional = hints[f.name], False
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation, optional = args[0], True
        out.append((f.name, annotation, optional or f.default is not dataclasses.MISSING))
    return out


def spark_type(annotation: Any) -> T.DataType:
    """The Spark SQL type of a contract annotation."""
    if annotation is int:
        return T.LongType()
    if annotation is float:
        return T.DoubleType()
    if annotation is str:
        return T.StringType()
    if annotation is bool:
        return T.BooleanType()
    if typing.get_origin(annotation) is list:
        return T.ArrayType(spark_type(typing.get_args(annotation)[0]))
    if dataclasses.is_dataclass(annotation):
        return struct_type(annotation)
    raise TypeError(f"no Spark type for {annotation!r}")


def struct_type(cls: type) -> T.StructType:
    """The Spark schema of a contract dataclass (for ``from_json``)."""
    return T.StructType([T.StructField(n, spark_type(a)) for n, a, _ in fields_of(cls)])


# ----------------------------------------------------------------------------- validation


def sql_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# The checks are data, not SQL: one row per check of the contract's rule table (and of
# the field types), in parse_event's order, evaluated by one generic lambda. Spark plans
# the few hundred characters of that lambda on every micro-batch, whatever the number of
# rules; the table itself is a constant, folded once per batch.

#: Class name -> its checks (field, kind, parameters, reason); ``<class>/rules`` holds
#: those the verdict evaluates (the shape regex covers presence and types).
CHECK_TYPE = (
    "map<string, array<struct<f: string, k: string, t: string, n: bigint, i: bigint, "
    "d: double, m: decimal(38, 10), s: array<string>, o: string, r: string>>>"
)

#: (schema_of_variant regex of a valid value, reason when it is not) per contract type.
_TYPES = {
    int: ("^BIGINT$", "must be an integer"),
    float: (r"^(BIGINT|DOUBLE|FLOAT|DECIMAL\(\d+,\d+\))$", "must be a number"),
    str: ("^STRING$", "must be a string"),
    bool: ("^BOOLEAN$", "must be a boolean"),
    list: ("^ARRAY", "must be a list"),
    "object": ("^OBJECT", "must be an object"),
}


def _nested(annotation: Any) -> type | None:
    """The element class of a list-of-objects field (``items``), else None."""
    if typing.get_origin(annotation) is list:
        element = typing.get_args(annotation)[0]
        return element if dataclasses.is_dataclass(element) else None
    return None


def _check_rows(cls: type) -> list[dict[str, Any]]:
    """Every check of ``cls`` as rows of :data:`CHECK_TYPE`, in ``parse_event``'s order:
    each field's presence and type (and its elements'), then the rules of the table."""
    rows: list[dict[str, Any]] = []

    def add(field: str, kind: str, reason: str, **params: Any) -> None:
        rows.append({"f": field, "k": kind, "r": reason, **params})

    annotations = {}
    for name, annotation, optional in fields_of(cls):
        annotations[name] = annotation
        if not optional:
            add(name, "required", "is required")
        key = (
            list
            if typing.get_origin(annotation) is list
            else "object"
            if dataclasses.is_dataclass(annotation)
            else annotation
        )
        pattern, reason = _TYPES[key]
        add(name, "type", reason, t=pattern)
        element = _nested(annotation)
        if element is not None:
            add(name, "elements", "", o=element.__name__)
    for name, rule in rules_of(cls).items():
        numeric = "money" if rule.money else "int" if annotations[name] is int else "num"
        if rule.uuid:
            add(name, "uuid", rule.reason("uuid"))
        if rule.money:
            add(name, "money", rule.reason("money"))
        if rule.max_length is not None:
            add(name, "length", rule.reason("length"), n=rule.max_length)
        if rule.choices:
            add(name, "choices", rule.reason("choices"), s=list(rule.choices))
        if rule.min_items is not None:
            add(name, "min_items", rule.reason("min_items"), n=rule.min_items)
        if rule.max_items is not None:
            add(name, "max_items", rule.reason("max_items"), n=rule.max_items)
        for side, bound in (("min", rule.min), ("max", rule.max)):
            if bound is None or (numeric == "int" and abs(bound) >= INT64_MAX):
                continue  # a BIGINT holds any int64 bound
            param = {"int": "i", "num": "d", "money": "m"}[numeric]
            value = (
                float(bound) if numeric == "num" else str(bound) if numeric == "money" else bound
            )
            add(name, f"{side}_{numeric}", rule.reason("range"), **{param: value})
        if rule.not_after is not None:
            add(name, "not_after", rule.reason("not_after"), o=rule.not_after)
        if rule.not_future:
            add(name, "not_future", rule.reason("not_future"))
    return rows


def check_table() -> str:
    """SQL: the constant array of every check of every source event (and its elements)."""
    classes: list[type] = []
    for cls in SOURCE_EVENTS.values():
        for c in (cls, *filter(None, (_nested(a) for _, a, _ in fields_of(cls)))):
            if c not in classes:
                classes.append(c)
    table: dict[str, list[dict[str, Any]]] = {}
    for cls in classes:
        rows = _check_rows(cls)
        table[cls.__name__] = rows
        table[f"{cls.__name__}/rules"] = [r for r in rows if r["k"] not in ("required", "type")]
    return f"from_json({sql_literal(json.dumps(table, separators=(',', ':')))}, {sql_literal(CHECK_TYPE)})"


def _failed(c: str, m: str) -> str:
    """SQL: whether check ``c`` fails on the object whose fields are the map ``m``
    (NULL counts as passing: an absent optional value, a type checked elsewhere)."""
    value = f"element_at({m}, {c}.f)"
    text = f"try_variant_get({value}, '$', 'string')"
    long = f"try_variant_get({value}, '$', 'bigint')"
    double = f"try_variant_get({value}, '$', 'double')"
    money = f"try_cast({text} AS DECIMAL(38, 10))"
    array = f"try_variant_get({value}, '$', 'array<variant>')"
    missing = f"({value} IS NULL OR schema_of_variant({value}) = 'VOID')"
    uid = f"regexp_replace(lower(replace(replace({text}, 'urn:', ''), 'uuid:', '')), '[{{}}-]', '')"
    other = f"try_variant_get(element_at({m}, {c}.o), '$', 'bigint')"
    cases = {
        "required": missing,
        "type": f"NOT {missing} AND NOT regexp_like(schema_of_variant({value}), {c}.t)",
        "uuid": f"NOT regexp_like({uid}, '^[0-9a-f]{{32}}$')",
        "money": f"{money} IS NULL AND {text} IS NOT NULL",
        "length": f"char_length({text}) > {c}.n",
        "choices": f"NOT array_contains({c}.s, {text})",
        "min_items": f"array_size({array}) < {c}.n",
        "max_items": f"array_size({array}) > {c}.n",
        "min_int": f"{long} < {c}.i",
        "max_int": f"{long} > {c}.i",
        "min_num": f"{double} < {c}.d",
        "max_num": f"{double} > {c}.d",
        "min_money": f"{money} < {c}.m",
        "max_money": f"{money} > {c}.m",
        "not_after": f"{long} > {other}",
        "not_future": f"{long} > unix_millis(current_timestamp()) + {MAX_CLOCK_SKEW_MS}",
    }
    whens = " ".join(f"WHEN {sql_literal(k)} THEN {cond}" for k, cond in cases.items())
    return f"coalesce(CASE {c}.k {whens} END, false)"


def object_map(variant: str) -> str:
    return f"try_variant_get({variant}, '$', 'map<string, variant>')"


def _first_reason(cls: str, m: str, prefix: str, depth: int = 0) -> str:
    """SQL: ``invalid <prefix><field>: <reason>`` of the first failing check of the class
    named by the SQL string ``cls`` on the object map ``m``, or NULL."""
    c, x, i = f"c{depth}", f"x{depth}", f"i{depth}"
    field = f"{prefix} || {c}.f"
    element_prefix = f"{field} || '[' || {i} || '].'"
    # One level of elements (the contract has no deeper nesting).
    element_reason = (
        _first_reason(f"{c}.o", object_map(x), element_prefix, depth + 1) if depth == 0 else "NULL"
    )
    elements = (
        f"get(filter(transform(try_variant_get(element_at({m}, {c}.f), '$', 'array<variant>'), "
        f"({x}, {i}) -> CASE WHEN schema_of_variant({x}) NOT LIKE 'OBJECT%' "
        f"THEN 'invalid ' || {field} || '[' || {i} || ']: must be an object' "
        f"ELSE {element_reason} END), r -> r IS NOT NULL), 0)"
    )
    reason = (
        f"CASE WHEN {c}.k = 'elements' THEN {elements} "
        f"WHEN {_failed(c, m)} THEN 'invalid ' || {field} || ': ' || {c}.r END"
    )
    return (
        f"get(filter(transform(element_at(checks, {cls}), {c} -> {reason}), r -> r IS NOT NULL), 0)"
    )


_SHAPE_TYPES = {
    int: "BIGINT",
    float: r"BIGINT|DOUBLE|FLOAT|DECIMAL\(\d+,\d+\)",
    str: "STRING",
    bool: "BOOLEAN",
}


def _shape(annotation: Any) -> str:
    """Regex of the ``schema_of_variant`` type a valid value of ``annotation`` has."""
    if typing.get_origin(annotation) is list:
        return f"ARRAY<{_shape(typing.get_args(annotation)[0])}>"
    if dataclasses.is_dataclass(annotation):
        fields = sorted(fields_of(annotation))
        assert not any(optional for _, _, optional in fields), "nested optional fields"
        return "OBJECT<" + ", ".join(f"{n}: (?:{_shape(a)})" for n, a, _ in fields) + ">"
    return _SHAPE_TYPES[annotation]


def _shape_pattern(cls: type[Event]) -> str:
    """Regex: the message's JSON types are exactly a valid ``cls`` (keys are sorted in a
    VARIANT). One ``schema_of_variant`` and one regex cover the presence and type checks
    of every field, so a valid message (nearly all of them) costs little to validate."""
    pieces = []
    for name, annotation, optional in sorted([*fields_of(cls), ("schema_version", int, False)]):
        if optional:
            pieces.append(f"(?:{name}: (?:{_shape(annotation)}|VOID), )?")
        else:
            pieces.append(f"{name}: (?:{_shape(annotation)}), ")
    return "^OBJECT<" + "".join(pieces)[:-2] + ">$"


def validation_verdict() -> str:
    """SQL over ``source_topic``, ``v`` (the VARIANT), ``m`` (its fields) and ``checks``:
    whether the message is a valid event of its topic. The hot path: a shape regex and
    the rule checks, no reason text."""
    shapes = " ".join(
        f"WHEN {sql_literal(t.value)} THEN {sql_literal(_shape_pattern(cls))}"
        for t, cls in SOURCE_EVENTS.items()
    )
    names = " ".join(
        f"WHEN {sql_literal(t.value)} THEN {sql_literal(cls.__name__)}"
        for t, cls in SOURCE_EVENTS.items()
    )
    cls = f"CASE source_topic {names} END"
    # The merged shape of an array lists a field any element has: check each has all.
    elements = (
        f"exists(try_variant_get(element_at(m, c.f), '$', 'array<variant>'), x -> "
        f"exists(element_at(checks, c.o), e -> {_failed('e', object_map('x'))}))"
    )
    return (
        f"coalesce(regexp_like(replace(schema_of_variant(v), ', >', '>'), CASE source_topic {shapes} END), false) "
        f"AND try_variant_get(v, '$.schema_version', 'bigint') = {SCHEMA_VERSION} "
        f"AND NOT exists(element_at(checks, {cls} || '/rules'), c -> CASE WHEN c.k = 'elements' "
        f"THEN {elements} ELSE {_failed('c', 'm')} END)"
    )


def validation_reason() -> str:
    """SQL over ``value_text``, ``v``, ``m``, ``source_topic`` and ``checks``: why the
    message is not a valid event of its topic, in ``parse_event``'s order (computed only
    for messages whose verdict failed)."""
    known = " ".join(
        f"WHEN {sql_literal(t.value)} THEN array('schema_version', {', '.join(sql_literal(n) for n, _, _ in fields_of(cls))})"
        for t, cls in SOURCE_EVENTS.items()
    )
    unknown = f"get(array_sort(array_except(json_object_keys(value_text), CASE source_topic {known} END)), 0)"
    names = " ".join(
        f"WHEN {sql_literal(t.value)} THEN {sql_literal(cls.__name__)}"
        for t, cls in SOURCE_EVENTS.items()
    )
    version = "variant_get(v, '$.schema_version')"
    checks = [
        ("value_text IS NULL", sql_literal("invalid value: message has no value")),
        ("v IS NULL", sql_literal("invalid value: not valid JSON")),
        (
            "schema_of_variant(v) NOT LIKE 'OBJECT%'",
            sql_literal("invalid value: must be a JSON object"),
        ),
        (f"{version} IS NULL", sql_literal("invalid schema_version: is required")),
        (
            f"NOT coalesce(schema_of_variant({version}) = 'BIGINT' AND "
            f"try_variant_get(v, '$.schema_version', 'bigint') = {SCHEMA_VERSION}, false)",
            sql_literal("invalid schema_version: unsupported version"),
        ),
        (f"{unknown} IS NOT NULL", f"'invalid ' || {unknown} || ': is not a field of this event'"),
    ]
    envelope = " ".join(f"WHEN {c} THEN {r}" for c, r in checks)
    return f"CASE {envelope} ELSE {_first_reason(f'CASE source_topic {names} END', 'm', sql_literal(''))} END"

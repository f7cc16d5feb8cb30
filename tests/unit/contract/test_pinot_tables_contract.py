"""The Pinot tables hold the event contract: every field of a table's event is a column of
a matching type whose range holds every value the contract's rules accept (as do the
PostgreSQL columns the values come from and the stream job's Spark types), and the read
side turns the schema's null stand-ins back into None."""

from __future__ import annotations

import dataclasses
import types
import typing
from decimal import Decimal

import pytest

from contract import events
from contract.events import EVENT_TYPES, OrderEnriched
from contract.rules import INT64_MAX, INT64_MIN, Rule, rules_of
from pinot.definitions import load_tables
from tracker.tracking import selectors

#: Which Pinot data types may hold a contract type.
PINOT_TYPES = {int: {"INT", "LONG"}, float: {"DOUBLE", "FLOAT"}, str: {"STRING"}, list: {"JSON"}}

TABLES = load_tables()


def _base(annotation: typing.Any) -> type:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) or annotation


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_event_field_is_a_column_of_a_matching_type(table):
    definition = TABLES[table]
    event = EVENT_TYPES[definition.topic]
    hints = typing.get_type_hints(event)
    columns = {c.name: c.data_type for c in definition.columns}
    wrong = {
        f.name: (hints[f.name], columns.get(f.name))
        for f in dataclasses.fields(event)
        if columns.get(f.name) not in PINOT_TYPES[_base(hints[f.name])]
    }
    assert wrong == {}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_column_is_an_event_field_or_derived_from_one(table):
    """No column outlives its field: one the stream no longer writes (the retired
    eta_seconds) would hold only its default, and a query of it would read that as data."""
    definition = TABLES[table]
    fields = {f.name for f in dataclasses.fields(EVENT_TYPES[definition.topic])}
    ingestion = definition.config.get("ingestionConfig", {})
    derived = {t["columnName"] for t in ingestion.get("transformConfigs", [])}
    assert {c.name for c in definition.columns} - fields - derived == set()
    assert not {c.name for c in definition.columns} & EVENT_TYPES[definition.topic].RETIRED


def test_the_order_reads_know_the_null_stand_ins_of_orders_enriched():
    defaults = {c.name: c.default for c in TABLES["orders_enriched"].columns}
    optional = [f.name for f in dataclasses.fields(OrderEnriched) if f.default is None]
    assert optional  # the comparison below must not pass vacuously
    assert {n: defaults[n] for n in optional} == {
        n: selectors.NULL_VALUES.get(n, 0) for n in optional
    }


# ------------------------------------------------------------------- bounds fit every store

#: What a Pinot column type holds (a STRING holds 512 characters unless its spec says).
PINOT_INT_RANGES = {"INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}
PINOT_STRING_LENGTH = 512


def _column_specs(table: str) -> dict[str, dict]:
    schema = TABLES[table].schema
    return {
        spec["name"]: spec
        for key in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs")
        for spec in schema.get(key, [])
    }


def _int_bounds(event: type, name: str) -> tuple[int, int]:
    """The values the contract lets through for an integer field (type, then rule)."""
    rule = rules_of(event).get(name, Rule())
    low = rule.min if rule.min is not None else INT64_MIN
    high = rule.max if rule.max is not None else INT64_MAX
    return low, high


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_contract_bound_fits_its_pinot_column(table):
    """A value the contract accepts must be storable: the former DuckDB imitation once
    retried a batch forever on a quantity of 3,000,000,000 (accepted as a 64-bit integer, stored in an INT)."""
    event = EVENT_TYPES[TABLES[table].topic]
    hints = typing.get_type_hints(event)
    rules = rules_of(event)
    too_wide = {}
    for name, spec in _column_specs(table).items():
        if name not in hints:
            continue  # a derived column (stPoint)
        kind = _base(hints[name])
        if spec["dataType"] in PINOT_INT_RANGES:
            low, high = PINOT_INT_RANGES[spec["dataType"]]
            if not low <= _int_bounds(event, name)[0] <= _int_bounds(event, name)[1] <= high:
                too_wide[name] = (spec["dataType"], _int_bounds(event, name))
        elif spec["dataType"] == "STRING" and kind is str:
            rule = rules.get(name, Rule())
            longest = (
                rule.max_length
                or max(map(len, rule.choices), default=None)
                or (45 if rule.uuid else None)  # "urn:uuid:" + 36
            )
            limit = spec.get("maxLength", PINOT_STRING_LENGTH)
            if longest is None or longest > limit:
                too_wide[name] = ("STRING", longest, limit)
    assert too_wide == {}


def test_the_enriched_sums_fit_their_columns():
    """item_count is the sum of an order's quantities: lines x units stays within its INT."""
    lines = rules_of(events.OrderPlaced)["items"].max_items
    units = rules_of(events.OrderItem)["quantity"].max
    assert lines * units <= rules_of(OrderEnriched)["item_count"].max <= 2**31 - 1
    assert rules_of(events.OrderItemEnriched)["line"].max == lines


def _decimal_max(field) -> Decimal:
    return Decimal(10) ** (field.max_digits - field.decimal_places) - Decimal(1).scaleb(
        -field.decimal_places
    )


def test_every_contract_bound_fits_the_postgresql_column_the_value_comes_from():
    """The contract refuses nothing PostgreSQL holds for what Django publishes (strings:
    the same length), and accepts nothing wider than the column (numbers)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.orders import models as orders
    from tracker.restaurants.models import Product, Restaurant

    def int_range(field) -> tuple[int, int]:
        return connection.ops.integer_field_range(field.get_internal_type())

    item_rules = rules_of(events.OrderItem)
    placed_rules = rules_of(events.OrderPlaced)
    status_rules = rules_of(events.OrderStatusChanged)
    numbers = {
        "OrderItem.quantity": (item_rules["quantity"], int_range(orders.OrderItem._meta.get_field("quantity"))),
        "OrderPlaced.order_id": (placed_rules["order_id"], int_range(orders.Order._meta.pk)),
        "OrderPlaced.customer_id": (placed_rules["customer_id"], int_range(orders.Order._meta.get_field("customer").target_field)),
        "OrderPlaced.restaurant_id": (placed_rules["restaurant_id"], int_range(Restaurant._meta.pk)),
        "OrderItem.product_id": (item_rules["product_id"], int_range(Product._meta.pk)),
        "OrderItem.unit_price": (item_rules["unit_price"], (0, _decimal_max(orders.OrderItem._meta.get_field("unit_price")))),
        "OrderPlaced.total": (placed_rules["total"], (0, _decimal_max(orders.Order._meta.get_field("total")))),
    }  # fmt: skip
    too_wide = {
        name: (rule.min, rule.max, held)
        for name, (rule, held) in numbers.items()
        if not held[0] <= rule.min <= rule.max <= held[1]
    }
    assert too_wide == {}

    user = get_user_model()
    person = user._meta.get_field("first_name").max_length + 1
    person += user._meta.get_field("last_name").max_length
    assert (
        max(person, user._meta.get_field("username").max_length)
        == placed_rules["customer_name"].max_length
    )
    strings = {
        "OrderItem.name": (item_rules["name"], Product._meta.get_field("name")),
        "OrderItem.category": (item_rules["category"], Product._meta.get_field("category")),
        "OrderPlaced.restaurant_name": (placed_rules["restaurant_name"], Restaurant._meta.get_field("name")),
    }  # fmt: skip
    assert {n: r.max_length for n, (r, _) in strings.items()} == {
        n: f.max_length for n, (_, f) in strings.items()
    }
    status_column = orders.OrderStatusChange._meta.get_field("status").max_length
    assert max(map(len, status_rules["status"].choices)) <= status_column


def test_every_contract_bound_fits_its_spark_type():
    """The stream job reads integers as LongType (the bounds above are within it) and turns
    event_time and placed_at into timestamps: both are bounded towards the future."""
    from pyspark.sql import types as T

    from streaming import validation

    for event in validation.SOURCE_EVENTS.values():
        for name, annotation, _ in validation.fields_of(event):
            if annotation is int:
                assert isinstance(validation.spark_type(annotation), T.LongType)
                low, high = _int_bounds(event, name)
                assert INT64_MIN <= low <= high <= INT64_MAX
    for event in (events.OrderStatusChanged, events.DeliveryLocation):
        rules = rules_of(event)
        assert rules["event_time"].not_future and rules["placed_at"].not_after == "event_time"

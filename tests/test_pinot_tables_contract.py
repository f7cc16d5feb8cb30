"""The Pinot tables hold the event contract: every field of a table's event is a column of
a matching type, and the read side turns the schema's null stand-ins back into None."""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest

from pinot.definitions import load_tables
from tracker.core.events import EVENT_TYPES, OrderEnriched
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


def test_the_order_reads_know_the_null_stand_ins_of_orders_enriched():
    defaults = {c.name: c.default for c in TABLES["orders_enriched"].columns}
    optional = [f.name for f in dataclasses.fields(OrderEnriched) if f.default is None]
    assert optional  # the comparison below must not pass vacuously
    assert {n: defaults[n] for n in optional} == {
        n: selectors.NULL_VALUES.get(n, 0) for n in optional
    }

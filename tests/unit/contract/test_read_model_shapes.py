"""The read model's shapes are declared once: each serializer renders exactly its shape's
fields, and REST and WebSocket send the same JSON for them (:func:`to_json`)."""

from __future__ import annotations

import dataclasses
import types
import typing
from decimal import Decimal

from rest_framework import serializers

from tracker.tracking import shapes
from tracker.tracking.serializers import (
    EtaSerializer,
    OrderDetailSerializer,
    OrderSummarySerializer,
    PointSerializer,
    to_json,
)

T0 = 1_795_000_000_123  # 2026-11-18T11:06:40.123Z


def _shape_in(annotation: typing.Any) -> type | None:
    """The shape an annotation holds (``Named | None``, ``tuple[Point, ...]``), if any."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, tuple):
        found = [s for a in typing.get_args(annotation) if (s := _shape_in(a)) is not None]
        return found[0] if found else None
    return None


def _mismatches(serializer: serializers.Serializer, shape: type, where: str) -> list[str]:
    fields = serializer.fields
    hints = typing.get_type_hints(shape)
    problems = []
    if set(fields) != set(hints):
        problems.append(f"{where}: serializer {sorted(fields)} vs shape {sorted(hints)}")
    for name in set(fields) & set(hints):
        field, inner = fields[name], _shape_in(hints[name])
        if isinstance(field, serializers.ListSerializer):
            field = field.child
        if isinstance(field, serializers.Serializer) != (inner is not None):
            problems.append(f"{where}.{name}: nested on one side only")
        elif inner is not None:
            problems += _mismatches(field, inner, f"{where}.{name}")
    return problems


def test_each_serializer_renders_exactly_its_shapes_fields():
    for serializer, shape in [
        (OrderDetailSerializer(), shapes.OrderDetail),
        (OrderSummarySerializer(), shapes.OrderSummary),
        (EtaSerializer(), shapes.Arrival),
    ]:
        assert _mismatches(serializer, shape, shape.__name__) == []


def test_the_mismatch_check_sees_a_missing_field():
    class Short(serializers.Serializer):
        lat = serializers.FloatField()

    assert _mismatches(Short(), shapes.Point, "Point") != []


def _detail() -> shapes.OrderDetail:
    point = shapes.Point(12.961, 77.63, T0 + 60_000)
    basis = shapes.EtaBasis(None, None, "default", 18.2, 1.3, 1.63, None)
    return shapes.OrderDetail(
        id=7, status="OUT_FOR_DELIVERY", status_label="Out for delivery", status_time=T0,
        is_active=True, can_cancel=False, created_at=T0 - 600_000, total=Decimal("18.5"),
        items=(shapes.LineItem(3, "Dosa", "mains", 2, Decimal("9.25"), Decimal("18.50")),),
        restaurant=shapes.Place(1, "Alpha", 12.97, 77.6),
        customer=shapes.Named(4, "Alice"),
        delivery=shapes.DeliveryPlace("12 MG Road", 12.9756, 77.6066),
        courier=shapes.Named(9, "Ravi"),
        timeline=(shapes.TimelineStep("PLACED_ORDER", "Placed", "done", T0 - 600_000, T0, 600.0),),
        position=point, path=(shapes.Point(12.96, 77.62, T0 + 1), point),
        distance_left_km=1.25,
        eta=shapes.Arrival(T0 + 900_000, T0 + 600_000, T0 + 1_200_000, T0, basis),
        tracking=shapes.TrackingSource("pinot", 6, T0 + 60_000),
    )  # fmt: skip


def test_a_detail_renders_times_as_iso_milliseconds_and_money_as_cents():
    body = to_json(_detail())
    assert body["status_time"] == "2026-11-18T11:06:40.123Z"
    assert body["total"] == "18.50" and body["items"][0]["unit_price"] == "9.25"
    assert body["timeline"][0]["left_at"] == "2026-11-18T11:06:40.123Z"
    assert body["path"][0] == {"lat": 12.96, "lon": 77.62, "at": "2026-11-18T11:06:40.124Z"}
    assert (
        body["eta"]["basis"]["stats_as_of"] is None and body["eta"]["basis"]["speed"] == "default"
    )
    assert body["courier"] == {"id": 9, "name": "Ravi"}
    assert to_json(None) is None


def test_a_point_renders_as_its_fields_would_one_by_one():
    """PointSerializer skips DRF's per-field lookups (trails are long); the result must be
    what its declared fields make."""
    point = shapes.Point(12.961, 77.63, T0)
    fast = PointSerializer()
    assert fast.to_representation(point) == serializers.Serializer.to_representation(fast, point)

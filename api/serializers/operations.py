"""Operations: time in status, stuck orders, deliveries in an area, dashboards, dead letters.

The response serializers render the selectors' dataclasses directly.
"""

from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers.fields import QuerySerializer, RoundedFloatField, results_of
from contract.events import DeadLetter
from contract.rules import ID
from tracker.operations.stages import STAGES
from tracker.tracking.selectors import WINDOWS, WindowStats
from tracker.tracking.serializers import STATUSES, EpochMillisField, EtaSerializer, MoneyField

# --------------------------------------------------------------------------- requests


class RestaurantQuerySerializer(QuerySerializer):
    restaurant = serializers.IntegerField(
        min_value=ID.min, max_value=ID.max, required=False,
        help_text="Operators: any restaurant (default all); staff: one of theirs "
        "(default: their only one).",
    )  # fmt: skip


class StuckOrdersQuerySerializer(RestaurantQuerySerializer):
    older_than = serializers.IntegerField(
        min_value=0, max_value=30 * 24 * 3600, default=600, help_text="Seconds in status."
    )
    status = serializers.ChoiceField(choices=STATUSES, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=50)


class DeadLettersQuerySerializer(QuerySerializer):
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)


#: A polygon's bounds: rings (the outer one is searched) and positions in each.
MAX_RINGS, MIN_POSITIONS, MAX_POSITIONS = 10, 4, 1000

#: GeoJSON linear rings, [[[lon, lat], ...], ...]: what the schema can say of them. That a
#: ring is closed and a latitude within ±90 it cannot (OpenAPI 3.0 has no tuples): the
#: server checks both and names the position.
RINGS_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_RINGS,
    "items": {
        "type": "array",
        "minItems": MIN_POSITIONS,
        "maxItems": MAX_POSITIONS,
        "description": "A closed linear ring: the last position repeats the first.",
        "items": {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "description": "[lon, lat]",
            "items": {"type": "number", "minimum": -180, "maximum": 180},
        },
    },
}
POLYGON_SCHEMA = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": ["Polygon"]}, "coordinates": RINGS_SCHEMA},
    "required": ["type", "coordinates"],
}
#: The request: a Polygon geometry, or a Feature wrapping one.
GEOJSON_POLYGON_SCHEMA = {
    "description": "A GeoJSON Polygon geometry, or a Feature wrapping one ([lon, lat] positions).",
    "oneOf": [
        POLYGON_SCHEMA,
        {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["Feature"]},
                "geometry": POLYGON_SCHEMA,
            },
            "required": ["type", "geometry"],
        },
    ],
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _area(points: list[tuple[float, float]]) -> float:
    """Twice the ring's signed area (the shoelace formula): 0 when its points are on a line."""
    return sum(x1 * y2 - x2 * y1 for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False))


def outer_ring(rings: Any, where: str) -> list[tuple[float, float]]:
    """The outer ring's (lon, lat) points, every ring checked against :data:`RINGS_SCHEMA`
    and closed; a ValidationError names the bad ring or position."""
    if not isinstance(rings, list) or not 1 <= len(rings) <= MAX_RINGS:
        raise serializers.ValidationError({where: [f"must be 1 to {MAX_RINGS} linear rings"]})
    outer = []
    for r, ring in enumerate(rings):
        if not isinstance(ring, list) or not MIN_POSITIONS <= len(ring) <= MAX_POSITIONS:
            raise serializers.ValidationError(
                {
                    f"{where}[{r}]": [
                        f"a linear ring has {MIN_POSITIONS} to {MAX_POSITIONS} positions"
                    ]
                }
            )
        points = []
        for p, position in enumerate(ring):
            if (
                not isinstance(position, list)
                or len(position) != 2
                or not all(map(_number, position))
            ):
                raise serializers.ValidationError({f"{where}[{r}][{p}]": ["must be [lon, lat]"]})
            try:  # a 400-digit integer is valid JSON, but no float
                lon, lat = float(position[0]), float(position[1])
            except OverflowError:
                lon = lat = math.inf
            if not (-180 <= lon <= 180 and -90 <= lat <= 90):
                raise serializers.ValidationError({f"{where}[{r}][{p}]": ["out of range"]})
            points.append((lon, lat))
        if points[0] != points[-1]:
            raise serializers.ValidationError(
                {
                    f"{where}[{r}]": [
                        "a linear ring must be closed: its last position repeats the first"
                    ]
                }
            )
        if _area(points) == 0:  # Pinot's geometry library refuses it (a 503, not a 400)
            raise serializers.ValidationError(
                {f"{where}[{r}]": ["a linear ring must enclose an area (not all on one line)"]}
            )
        outer = outer or points
    return outer


class GeoJSONPolygonSerializer(serializers.Serializer):
    """A GeoJSON Polygon geometry, or a Feature wrapping one ([lon, lat] positions)."""

    # The schema is GEOJSON_POLYGON_SCHEMA (api.schema maps this serializer to it).
    type = serializers.ChoiceField(choices=["Polygon", "Feature"])
    coordinates = serializers.JSONField(required=False)
    geometry = serializers.JSONField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["type"] == "Polygon":
            if "coordinates" not in attrs:
                raise serializers.ValidationError({"coordinates": ["a Polygon needs coordinates"]})
            return {"points": outer_ring(attrs["coordinates"], "coordinates")}
        geometry = attrs.get("geometry")
        if not isinstance(geometry, dict) or geometry.get("type") != "Polygon":
            raise serializers.ValidationError({"geometry": ["must be a GeoJSON Polygon"]})
        if "coordinates" not in geometry:
            raise serializers.ValidationError(
                {"geometry.coordinates": ["a Polygon needs coordinates"]}
            )
        return {"points": outer_ring(geometry["coordinates"], "geometry.coordinates")}


# --------------------------------------------------------------------------- responses


class StatusPercentilesSerializer(serializers.Serializer):
    """Seconds the not-yet-delivered orders have spent in their current status."""

    status = serializers.ChoiceField(choices=STATUSES)
    orders = serializers.IntegerField()
    min = RoundedFloatField(3)
    p50 = RoundedFloatField(3)
    avg = RoundedFloatField(3)
    p75 = RoundedFloatField(3)
    p90 = RoundedFloatField(3)
    p99 = RoundedFloatField(3)
    max = RoundedFloatField(3)


class StuckOrderSerializer(serializers.Serializer):
    order_id = serializers.IntegerField()
    customer_id = serializers.IntegerField()
    restaurant_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=STATUSES)
    status_time = EpochMillisField(read_only=True)
    seconds_in_status = RoundedFloatField(1)
    total = MoneyField()


class DeliveryInAreaSerializer(serializers.Serializer):
    order_id = serializers.IntegerField()
    courier_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=STATUSES)
    lat = serializers.FloatField()
    lon = serializers.FloatField()
    at = EpochMillisField(read_only=True)
    distance_left_km = serializers.FloatField()
    eta = EtaSerializer(
        allow_null=True,
        help_text="The arrival the order's own page shows (null until the pipeline's record "
        "of the order is readable, or once it is delivered).",
    )


class DishSerializer(serializers.Serializer):
    product_name = serializers.CharField()
    quantity = serializers.IntegerField()
    orders = serializers.IntegerField()


def _change(current: float, previous: float) -> float | None:
    """Percent change against the period before; None when there was none."""
    if previous == 0:
        return None
    return round((current - previous) / previous * 100, 1)


class WindowStatsSerializer(serializers.Serializer):
    """One window (e.g. the last hour) against the period before it."""

    orders = serializers.IntegerField()
    previous_orders = serializers.IntegerField()
    orders_change_pct = serializers.SerializerMethodField()
    sales = MoneyField()
    previous_sales = MoneyField()
    sales_change_pct = serializers.SerializerMethodField()
    average_order_value = serializers.SerializerMethodField()
    previous_average_order_value = serializers.SerializerMethodField()
    average_order_value_change_pct = serializers.SerializerMethodField()
    top_dishes = DishSerializer(
        many=True, help_text="Top 3 by quantity; cancelled orders excluded."
    )

    def get_orders_change_pct(self, window: WindowStats) -> float | None:
        return _change(window.orders, window.previous_orders)

    def get_sales_change_pct(self, window: WindowStats) -> float | None:
        return _change(window.sales, window.previous_sales)

    @extend_schema_field(serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True))
    def get_average_order_value(self, window: WindowStats) -> str | None:
        return _average(window.sales, window.orders)

    @extend_schema_field(serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True))
    def get_previous_average_order_value(self, window: WindowStats) -> str | None:
        return _average(window.previous_sales, window.previous_orders)

    def get_average_order_value_change_pct(self, window: WindowStats) -> float | None:
        if not window.orders or not window.previous_orders:
            return None
        return _change(window.sales / window.orders, window.previous_sales / window.previous_orders)


def _average(sales: float, orders: int) -> str | None:
    """Sales per order as a money string; None without orders."""
    return f"{sales / orders:.2f}" if orders else None


class SalesSeriesQuerySerializer(RestaurantQuerySerializer):
    window = serializers.ChoiceField(choices=list(WINDOWS), default="24h")


class SalesBucketSerializer(serializers.Serializer):
    """One bucket of the chart and the same bucket of the period before."""

    start = EpochMillisField(read_only=True)
    orders = serializers.IntegerField()
    sales = MoneyField()
    previous_orders = serializers.IntegerField()
    previous_sales = MoneyField()


class RestaurantDashboardSerializer(serializers.Serializer):
    restaurant_id = serializers.IntegerField()
    restaurant_name = serializers.CharField()
    windows = serializers.DictField(
        child=WindowStatsSerializer(), help_text="Keyed by window: 1h, 24h, 7d."
    )


class DeadLetterSerializer(serializers.Serializer):
    source_topic = serializers.CharField()
    source_partition = serializers.IntegerField()
    source_offset = serializers.IntegerField()
    reason = serializers.CharField()
    received_at = EpochMillisField(source="event_time", read_only=True)
    key = serializers.SerializerMethodField()
    original = serializers.SerializerMethodField()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_key(self, letter: DeadLetter) -> str | None:
        return letter.key().decode(errors="replace") if letter.key_b64 else None

    def get_original(self, letter: DeadLetter) -> str:
        return letter.original_value().decode(errors="replace")


StatusPercentilesResults = results_of(StatusPercentilesSerializer, "StatusPercentilesResults")
StuckOrderResults = results_of(StuckOrderSerializer, "StuckOrderResults")
DeliveryInAreaResults = results_of(DeliveryInAreaSerializer, "DeliveryInAreaResults")
RestaurantDashboardResults = results_of(RestaurantDashboardSerializer, "RestaurantDashboardResults")
DeadLetterResults = results_of(DeadLetterSerializer, "DeadLetterResults")
SalesSeriesResults = results_of(SalesBucketSerializer, "SalesSeriesResults")


class PipelineStageSerializer(serializers.Serializer):
    name = serializers.ChoiceField(choices=[stage.name for stage in STAGES])
    label = serializers.CharField()
    status = serializers.ChoiceField(choices=["ok", "behind", "stalled", "unknown"])
    lag = serializers.IntegerField(allow_null=True, help_text="Records not processed yet")
    input_total = serializers.IntegerField(allow_null=True, help_text="Records that reached it")
    rate = serializers.FloatField(allow_null=True, help_text="Records per second, last sample")
    stuck_seconds = serializers.FloatField(
        help_text="Seconds it has not moved while its input grew (0 when moving or idle)"
    )
    error = serializers.CharField(allow_null=True, help_text="Why the status is unknown")


class PipelineSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "behind", "stalled"])
    sampled_at = serializers.FloatField(allow_null=True, help_text="Epoch seconds")
    stall_seconds = serializers.FloatField()
    behind_records = serializers.IntegerField()
    stages = PipelineStageSerializer(many=True)

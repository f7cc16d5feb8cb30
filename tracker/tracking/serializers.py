"""The JSON of the read model's shapes (:mod:`tracker.tracking.shapes`), for every channel.

REST answers with :func:`to_json` and the WebSocket sends it, so both channels send the
same body; the REST schema describes these serializers. They render only: requests are
parsed by the API's own serializers.
"""

from __future__ import annotations

import hashlib
from decimal import ROUND_HALF_UP
from typing import Any

from rest_framework import serializers

from contract.events import OrderStatus
from tracker.tracking import shapes
from tracker.tracking.formats import iso_ms, money

STATUSES = [s.value for s in OrderStatus]


class MoneyField(serializers.DecimalField):
    """A decimal string ("18.50") from a Decimal (the database) or a float (Pinot)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(
            max_digits=12, decimal_places=2, rounding=ROUND_HALF_UP, coerce_to_string=True, **kwargs
        )

    def to_representation(self, value: Any) -> str | None:
        return money(value)


class EpochMillisField(serializers.DateTimeField):
    """A time in epoch millis (the contract's unit) as ISO-8601 UTC with milliseconds."""

    def to_representation(self, value: int | None) -> str | None:
        return iso_ms(value)


class LineItemSerializer(serializers.Serializer):
    product_id = serializers.IntegerField()
    name = serializers.CharField()
    category = serializers.CharField()
    quantity = serializers.IntegerField()
    unit_price = MoneyField()
    line_total = MoneyField()


class NamedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class LatLonSerializer(serializers.Serializer):
    lat = serializers.FloatField()
    lon = serializers.FloatField()


class PlaceSerializer(NamedSerializer, LatLonSerializer):
    """A restaurant: who and where."""


class DeliveryPlaceSerializer(LatLonSerializer):
    address = serializers.CharField()


class PointSerializer(LatLonSerializer):
    """A courier position and when it was taken."""

    at = EpochMillisField()

    def to_representation(self, instance: shapes.Point) -> dict[str, Any]:
        # The fields' own values, without DRF's lookups per field: a trail has up to a
        # thousand points, whose field-by-field rendering was a third of a detail's.
        return {"lat": float(instance.lat), "lon": float(instance.lon), "at": iso_ms(instance.at)}


class TimelineStepSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=STATUSES)
    label = serializers.CharField()
    state = serializers.ChoiceField(choices=["done", "current", "pending", "skipped"])
    entered_at = EpochMillisField(allow_null=True)
    left_at = EpochMillisField(allow_null=True)
    duration_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the order was in the step; null while it still is."
    )


class TrackingSourceSerializer(serializers.Serializer):
    source = serializers.ChoiceField(
        choices=["pinot", "database"],
        help_text="database: the pipeline has not seen the order yet (about a second).",
    )
    version = serializers.IntegerField()
    updated_at = EpochMillisField()


class EtaBasisSerializer(serializers.Serializer):
    """What the prediction rests on: whose kitchen times, which courier speed, the route."""

    kitchen = serializers.ChoiceField(
        choices=["restaurant_by_hour", "restaurant", "hour_of_day", "all_restaurants", "default"],
        allow_null=True,
        help_text="Whose kitchen times: every restaurant's at this hour of day times this "
        "restaurant's recent pace; this restaurant's recent orders (no history of the hour); "
        "every restaurant's at this hour or recently (too few of its own); or the built-in "
        "default (no history); null once cooked.",
    )
    kitchen_samples = serializers.IntegerField(allow_null=True)
    speed = serializers.ChoiceField(
        choices=["hour_of_day", "all_hours", "default"],
        allow_null=True,
        help_text="Courier speed of the hour of day, of all hours, or the default.",
    )
    speed_kmh = serializers.FloatField(allow_null=True, help_text="Median road speed.")
    route_factor = serializers.FloatField(
        allow_null=True, help_text="Travelled distance over the straight line, learned."
    )
    route_km_left = serializers.FloatField(allow_null=True)
    stats_as_of = EpochMillisField(
        allow_null=True, help_text="When the statistics were read from Pinot (null: defaults)."
    )


class EtaSerializer(serializers.Serializer):
    """The predicted arrival and its range (10th to 90th percentile): the one ETA, the
    same for an order on every page, list, answer and socket message."""

    arrives_at = EpochMillisField()
    earliest = EpochMillisField()
    latest = EpochMillisField()
    computed_at = EpochMillisField()
    basis = EtaBasisSerializer()


class OrderStateSerializer(serializers.Serializer):
    """What every shape of an order (a list's row, a detail, a pushed update) says of its
    state, declared once."""

    status = serializers.ChoiceField(choices=STATUSES)
    status_label = serializers.CharField()
    status_time = EpochMillisField()
    total = MoneyField()
    distance_left_km = serializers.FloatField(allow_null=True)
    eta = EtaSerializer(
        allow_null=True, help_text="From placement until delivered; null when finished."
    )


class OrderHeadSerializer(OrderStateSerializer):
    """What a list and a detail both show of an order."""

    id = serializers.IntegerField()
    is_active = serializers.BooleanField()
    created_at = EpochMillisField()
    customer = NamedSerializer()


class OrderDetailSerializer(OrderHeadSerializer):
    """One order: items and total from the database, tracking from Pinot."""

    can_cancel = serializers.BooleanField()
    items = LineItemSerializer(many=True)
    restaurant = PlaceSerializer()
    delivery = DeliveryPlaceSerializer()
    courier = NamedSerializer(allow_null=True)
    timeline = TimelineStepSerializer(many=True)
    position = PointSerializer(allow_null=True)
    path = PointSerializer(many=True)
    tracking = TrackingSourceSerializer()


class StatusTimesSerializer(serializers.Serializer):
    """When the order entered each status it reached (a status not reached is absent)."""

    def get_fields(self) -> dict[str, serializers.Field]:
        return {s: EpochMillisField(required=False) for s in STATUSES}


class OrderUpdateSerializer(OrderStateSerializer):
    """An order's pushed ``update`` (the WebSocket's; docs/api.md, "Live updates"): its
    state rendered as the detail's is, with what a socket client applies it by."""

    kind = serializers.ChoiceField(choices=["status", "position"])
    order_id = serializers.IntegerField()
    customer_id = serializers.IntegerField()
    restaurant_id = serializers.IntegerField()
    version = serializers.IntegerField()
    status_times = StatusTimesSerializer()
    position = PointSerializer(allow_null=True)


class SummaryItemSerializer(serializers.Serializer):
    name = serializers.CharField(allow_null=True)
    quantity = serializers.IntegerField(allow_null=True)


class OrderSummarySerializer(OrderHeadSerializer):
    """An order in a list: its status and tracking as the read side has them."""

    item_count = serializers.IntegerField()
    items = SummaryItemSerializer(many=True)
    restaurant = NamedSerializer()
    version = serializers.IntegerField()


#: Part of every validator of a rendered shape (:func:`tracker.tracking.read_model.detail_source`):
#: raise it with any change to how a shape renders that its declared fields do not show
#: (a field's format, a rounding), so clients holding the old body get the new one.
#: A change to the declared fields changes the validators by itself (:data:`SHAPES_VERSION`).
RENDERING_VERSION = 1


#: One serializer per shape, built once: a serializer deep-copies its declared fields
#: when it is created, a large part of a warm detail read's own work for this nested
#: shape (docs/performance.md), while rendering through them keeps no state.
_RENDERERS: dict[type, serializers.Serializer] = {
    shapes.OrderDetail: OrderDetailSerializer(),
    shapes.OrderSummary: OrderSummarySerializer(),
    shapes.Arrival: EtaSerializer(),
    shapes.OrderUpdate: OrderUpdateSerializer(),
}


Shown = shapes.OrderDetail | shapes.OrderSummary | shapes.Arrival | shapes.OrderUpdate


def to_json(shown: Shown | None) -> dict[str, Any] | None:
    """The JSON every channel sends for one of the read model's shapes (None: null)."""
    return None if shown is None else _RENDERERS[type(shown)].to_representation(shown)


def _fields_of(serializer: serializers.Serializer) -> tuple:
    return tuple(
        (name, type(field).__name__, _fields_of(field) if isinstance(field, serializers.Serializer)
         else _fields_of(field.child) if isinstance(getattr(field, "child", None), serializers.Serializer)
         else ())
        for name, field in serializer.fields.items()
    )  # fmt: skip


#: The rendering's version and its shapes' declared fields: what a release changes in a
#: body changes this, and with it every ETag.
SHAPES_VERSION = hashlib.blake2b(
    repr((RENDERING_VERSION, [_fields_of(s) for s in _RENDERERS.values()])).encode(),
    digest_size=8,
).hexdigest()

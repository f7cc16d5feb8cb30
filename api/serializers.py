"""Request validation and response shapes of the API.

Times are ISO-8601 UTC strings; money is a decimal string ("18.50"), whether it
comes from the database (Decimal) or from Pinot (a float column, rounded to
cents here, in one place).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.contrib.auth import get_user_model
from rest_framework import serializers

from tracker.core.events import LIFECYCLE, OrderStatus
from tracker.customers.models import Address
from tracker.orders.models import Order
from tracker.orders.services import (
    MAX_GPS_CLOCK_SKEW_MS,
    MAX_LINES_PER_ORDER,
    MAX_QUANTITY_PER_LINE,
)
from tracker.restaurants.models import Product, Restaurant

CENT = Decimal("0.01")


def money(value: Decimal | float | None) -> str | None:
    if value is None:
        return None
    return str(Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP))


def iso_ms(ms: int | None) -> str | None:
    """Epoch millis (Pinot) -> ISO-8601 UTC with milliseconds."""
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms / 1000, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status_label(status: str) -> str:
    return status.replace("_", " ").capitalize()


# --------------------------------------------------------------------------- accounts


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(
        max_length=128, style={"input_type": "password"}, trim_whitespace=False
    )


class AddressSerializer(serializers.ModelSerializer):
    lat = serializers.FloatField(min_value=-90, max_value=90)
    lon = serializers.FloatField(min_value=-180, max_value=180)

    class Meta:
        model = Address
        fields = ["id", "label", "line1", "city", "lat", "lon", "is_default"]


class MeSerializer(serializers.ModelSerializer):
    roles = serializers.ListField(child=serializers.CharField(), read_only=True)
    name = serializers.SerializerMethodField()
    addresses = serializers.SerializerMethodField()
    restaurant_ids = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    courier_id = serializers.IntegerField(read_only=True, allow_null=True)
    customer_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "name", "email", "roles", "customer_id", "courier_id",
                  "restaurant_ids", "addresses"]  # fmt: skip

    def get_name(self, user) -> str:
        return user.get_full_name() or user.get_username()

    def get_addresses(self, user) -> list[dict[str, Any]]:
        customer = getattr(user, "customer", None)
        if customer is None:
            return []
        return AddressSerializer(customer.addresses.all(), many=True).data


# --------------------------------------------------------------------------- menu


class ProductSerializer(serializers.ModelSerializer):
    class Meta:
        model = Product
        fields = ["id", "name", "category", "description", "price", "image_url", "is_available"]


class RestaurantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Restaurant
        fields = ["id", "name", "address", "lat", "lon", "is_open"]


# --------------------------------------------------------------------------- orders


class ItemRequestSerializer(serializers.Serializer):
    product_id = serializers.IntegerField(min_value=1)
    quantity = serializers.IntegerField(min_value=1, max_value=MAX_QUANTITY_PER_LINE)


class DeliverySerializer(serializers.Serializer):
    address = serializers.CharField(max_length=300)
    lat = serializers.FloatField(min_value=-90, max_value=90)
    lon = serializers.FloatField(min_value=-180, max_value=180)


class PlaceOrderSerializer(serializers.Serializer):
    """Either ``address_id`` (one of my saved addresses) or an explicit ``delivery``."""

    restaurant_id = serializers.IntegerField(min_value=1)
    items = ItemRequestSerializer(many=True, allow_empty=False, max_length=MAX_LINES_PER_ORDER)
    address_id = serializers.IntegerField(min_value=1, required=False)
    delivery = DeliverySerializer(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("address_id" in attrs) == ("delivery" in attrs):
            raise serializers.ValidationError(
                {"address_id": ["give exactly one of address_id or delivery"]}
            )
        ids = [item["product_id"] for item in attrs["items"]]
        if len(ids) != len(set(ids)):
            raise serializers.ValidationError({"items": ["each product may appear only once"]})
        return attrs


class TransitionSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[s.value for s in OrderStatus], required=False,
        help_text="The status to move to; defaults to the next one on the lifecycle.",
    )  # fmt: skip


def not_in_the_future(moment: datetime) -> datetime:
    """A GPS fix may be at most MAX_GPS_CLOCK_SKEW_MS (30 s) ahead of the server's clock."""
    skew = MAX_GPS_CLOCK_SKEW_MS / 1000
    if moment.timestamp() > datetime.now(tz=UTC).timestamp() + skew:
        raise serializers.ValidationError(
            f"is more than {skew:g} s in the future; check the device clock"
        )
    return moment


class LocationPointSerializer(serializers.Serializer):
    lat = serializers.FloatField(min_value=-90, max_value=90)
    lon = serializers.FloatField(min_value=-180, max_value=180)
    recorded_at = serializers.DateTimeField(
        required=False,
        validators=[not_in_the_future],
        help_text="When the GPS fix was taken (default: now); at most 30 s ahead of the server",
    )


class LocationBatchSerializer(serializers.Serializer):
    """One point (``lat``/``lon``) or a batch (``points``) a mobile app buffered offline."""

    lat = serializers.FloatField(min_value=-90, max_value=90, required=False)
    lon = serializers.FloatField(min_value=-180, max_value=180, required=False)
    recorded_at = serializers.DateTimeField(required=False, validators=[not_in_the_future])
    points = LocationPointSerializer(many=True, required=False, allow_empty=False, max_length=500)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        single = "lat" in attrs or "lon" in attrs
        if single == ("points" in attrs):
            raise serializers.ValidationError({"points": ["give either lat/lon or points"]})
        if single:
            if "lat" not in attrs or "lon" not in attrs:
                raise serializers.ValidationError({"lat": ["lat and lon are both required"]})
            attrs["points"] = [{k: attrs[k] for k in ("lat", "lon", "recorded_at") if k in attrs}]
        return attrs


def order_line_items(order: Order) -> list[dict[str, Any]]:
    return [
        {
            "product_id": item.product_id,
            "name": item.product.name,
            "category": item.product.category,
            "quantity": item.quantity,
            "unit_price": money(item.unit_price),
            "line_total": money(item.line_total),
        }
        for item in order.items.all()
    ]


def timeline(current: str, periods: list, now_ms: int) -> list[dict[str, Any]]:
    """The seven lifecycle steps (plus CANCELLED when cancelled), each done/current/pending."""
    entered = {p.status: p for p in periods}
    steps = list(LIFECYCLE) + ([OrderStatus.CANCELLED] if current == OrderStatus.CANCELLED else [])
    out = []
    for status in steps:
        period = entered.get(status.value)
        if period is None:
            state = "skipped" if current == OrderStatus.CANCELLED else "pending"
            out.append({"status": status.value, "label": status_label(status.value), "state": state,
                        "entered_at": None, "left_at": None, "duration_seconds": None})  # fmt: skip
            continue
        is_current = status.value == current
        end = (
            period.left_at
            if period.left_at is not None
            else (None if status in (OrderStatus.DELIVERED, OrderStatus.CANCELLED) else now_ms)
        )
        out.append(
            {
                "status": status.value,
                "label": status_label(status.value),
                "state": "current" if is_current else "done",
                "entered_at": iso_ms(period.entered_at),
                "left_at": iso_ms(period.left_at),
                "duration_seconds": None
                if end is None
                else round((end - period.entered_at) / 1000, 1),
            }
        )
    return out


def tracking_summary(state) -> dict[str, Any]:
    """An order as the list endpoints show it, from its Pinot row."""
    return {
        "id": state.order_id,
        "status": state.status,
        "status_label": status_label(state.status),
        "status_time": iso_ms(state.status_time),
        "is_active": state.is_active,
        "created_at": iso_ms(state.created_at),
        "total": money(state.total),
        "item_count": state.item_count,
        "items": [{"name": i.get("name"), "quantity": i.get("quantity")} for i in state.items],
        "restaurant": {"id": state.restaurant_id, "name": state.restaurant_name},
        "customer": {"id": state.customer_id, "name": state.customer_name},
        "distance_left_km": state.distance_left_km,
        "eta_seconds": state.eta_seconds,
        "version": state.version,
    }


class GeoJSONPolygonSerializer(serializers.Serializer):
    """A GeoJSON Polygon geometry, or a Feature wrapping one ([lon, lat] positions)."""

    type = serializers.ChoiceField(choices=["Polygon", "Feature"])
    coordinates = serializers.JSONField(required=False)
    geometry = serializers.JSONField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        geometry = attrs if attrs["type"] == "Polygon" else attrs.get("geometry")
        if not isinstance(geometry, dict) or geometry.get("type") != "Polygon":
            raise serializers.ValidationError({"geometry": ["must be a GeoJSON Polygon"]})
        rings = geometry.get("coordinates")
        if not isinstance(rings, list) or not rings or not isinstance(rings[0], list):
            raise serializers.ValidationError({"coordinates": ["must be a list of linear rings"]})
        ring = rings[0]
        points = []
        if len(ring) > 1000:
            raise serializers.ValidationError({"coordinates": ["at most 1000 positions"]})
        for index, position in enumerate(ring):
            if (
                not isinstance(position, list)
                or len(position) < 2
                or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in position[:2]
                )
            ):
                raise serializers.ValidationError(
                    {f"coordinates[0][{index}]": ["must be [lon, lat]"]}
                )
            try:  # a 400-digit integer is valid JSON, but no float
                lon, lat = float(position[0]), float(position[1])
            except OverflowError:
                lon = lat = math.inf
            if not (-180 <= lon <= 180 and -90 <= lat <= 90):
                raise serializers.ValidationError({f"coordinates[0][{index}]": ["out of range"]})
            points.append((lon, lat))
        if len(points) < 4 or points[0] != points[-1]:
            raise serializers.ValidationError(
                {"coordinates": ["a linear ring needs at least 4 positions and must be closed"]}
            )
        if len(points) > 1000:
            raise serializers.ValidationError({"coordinates": ["at most 1000 positions"]})
        return {"points": points}

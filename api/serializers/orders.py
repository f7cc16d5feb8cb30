"""Placing, moving and following orders: the requests.

An order's answers are rendered by :mod:`tracker.tracking.serializers`, which the
WebSocket sends too, so the schema and both channels agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

from api.serializers.fields import QuerySerializer, text
from tracker.customers.models import DELIVERY_ADDRESS_MAX, one_line_problem
from tracker.orders.policy import ROLES
from tracker.orders.services import (
    MAX_GPS_CLOCK_SKEW_MS,
    MAX_LINES_PER_ORDER,
    MAX_POINTS_PER_REQUEST,
    MAX_QUANTITY_PER_LINE,
)
from tracker.restaurants.models import Restaurant
from tracker.tracking.serializers import STATUSES

# --------------------------------------------------------------------------- requests


class OrderLineSerializer(serializers.Serializer):
    product_id = serializers.IntegerField(min_value=1)
    quantity = serializers.IntegerField(min_value=1, max_value=MAX_QUANTITY_PER_LINE)


class DeliverySerializer(serializers.Serializer):
    address = serializers.CharField(**text(max_length=DELIVERY_ADDRESS_MAX))
    lat = serializers.FloatField(min_value=-90, max_value=90)
    lon = serializers.FloatField(min_value=-180, max_value=180)


class PlaceOrderSerializer(serializers.Serializer):
    """A new order: the restaurant, its products and quantities (each product once), and
    where to deliver: either `address_id` (one of my saved addresses) or `delivery`."""

    # Validated data: ``restaurant`` (the object), ``items`` and ``delivery`` (address,
    # lat, lon) whichever way it was given. Needs the customer in the context.

    restaurant_id = serializers.IntegerField(min_value=1)
    items = OrderLineSerializer(
        many=True, allow_empty=False, min_length=1, max_length=MAX_LINES_PER_ORDER
    )
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
        attrs["restaurant"] = Restaurant.objects.filter(pk=attrs["restaurant_id"]).first()
        if attrs["restaurant"] is None:
            raise serializers.ValidationError(
                {"restaurant_id": [f"no restaurant {attrs['restaurant_id']}"]}
            )
        if "address_id" in attrs:
            address = self.context["customer"].addresses.filter(pk=attrs["address_id"]).first()
            if address is None:
                raise serializers.ValidationError({"address_id": ["not one of your addresses"]})
            problem = one_line_problem(address.line1, address.city)
            if problem:  # saved before this was checked, or by the admin
                raise serializers.ValidationError(
                    {"address_id": [f"this saved address cannot be used: {problem}"]}
                )
            attrs["delivery"] = {"address": address.one_line,
                                 "lat": address.lat, "lon": address.lon}  # fmt: skip
        return attrs


#: Where ``advance`` may move an order: not back to the start, and not to CANCELLED (the
#: cancel endpoint does that, with its own rules).
ADVANCE_TARGETS = [s for s in STATUSES if s not in ("PLACED_ORDER", "CANCELLED")]


class TransitionSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=ADVANCE_TARGETS, required=False,
        help_text="The status to move to; defaults to the next one on the lifecycle. "
        "CANCELLED is the cancel endpoint's.",
        error_messages={"invalid_choice": '"{input}" is not a status advance moves to; '
                        "cancel with the cancel endpoint"},
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
    """One point (`lat`/`lon`) or a batch (`points`) a mobile app buffered offline."""

    lat = serializers.FloatField(min_value=-90, max_value=90, required=False)
    lon = serializers.FloatField(min_value=-180, max_value=180, required=False)
    recorded_at = serializers.DateTimeField(required=False, validators=[not_in_the_future])
    points = LocationPointSerializer(
        many=True, required=False, allow_empty=False, max_length=MAX_POINTS_PER_REQUEST
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        single = "lat" in attrs or "lon" in attrs
        if single == ("points" in attrs):
            raise serializers.ValidationError({"points": ["give either lat/lon or points"]})
        if single:
            if "lat" not in attrs or "lon" not in attrs:
                raise serializers.ValidationError({"lat": ["lat and lon are both required"]})
            attrs["points"] = [{k: attrs[k] for k in ("lat", "lon", "recorded_at") if k in attrs}]
        return attrs


class OrderListQuerySerializer(QuerySerializer):
    """Filters of the order list (``limit``/``offset`` belong to the pagination)."""

    status = serializers.ChoiceField(choices=STATUSES, required=False)
    state = serializers.ChoiceField(choices=["active", "past"], required=False)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # ``as`` is a Python keyword, so it cannot be declared as a class attribute.
        fields["as"] = serializers.ChoiceField(
            choices=ROLES,
            required=False,
            help_text=f"The role to list as, when you hold several: one of {', '.join(ROLES)} "
            "(default: the first you hold).",
        )
        return fields


# --------------------------------------------------------------------------- responses


class AcceptedSerializer(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Points the broker acknowledged.")

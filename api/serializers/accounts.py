"""Signing in, who I am, my addresses."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers.fields import StrictBooleanField, text
from tracker.customers.models import Address, one_line_problem
from tracker.orders import policy


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(**text(max_length=150))
    password = serializers.CharField(**text(max_length=128, style={"input_type": "password"}))
    client = serializers.CharField(
        **text(max_length=100),
        required=False,
        help_text="What is signing in (an app and device, e.g. `Ordertrack iOS, Ravi's "
        "phone`): shown beside the token in the admin, never needed.",
    )


class AddressSerializer(serializers.ModelSerializer):
    lat = serializers.FloatField(min_value=-90, max_value=90)
    lon = serializers.FloatField(min_value=-180, max_value=180)
    is_default = StrictBooleanField(required=False)

    class Meta:
        model = Address
        fields = ["id", "label", "line1", "city", "lat", "lon", "is_default"]
        extra_kwargs = {name: text() for name in ("label", "line1", "city")}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The street and city must fit an order's delivery address as one line."""
        current = self.instance
        line1 = attrs.get("line1", current.line1 if current else "")
        city = attrs.get("city", current.city if current else Address.city.field.default)
        problem = one_line_problem(line1, city)
        if problem:
            raise serializers.ValidationError({"line1": [problem]})
        return attrs


class MeSerializer(serializers.ModelSerializer):
    """A user with the roles they hold (a user may hold several)."""

    name = serializers.SerializerMethodField()
    roles = serializers.SerializerMethodField()
    customer_id = serializers.SerializerMethodField()
    courier_id = serializers.SerializerMethodField()
    restaurant_ids = serializers.SerializerMethodField()
    addresses = serializers.SerializerMethodField()

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "name", "email", "roles", "customer_id", "courier_id",
                  "restaurant_ids", "addresses"]  # fmt: skip

    def get_name(self, user: Any) -> str:
        return user.get_full_name() or user.get_username()

    def get_roles(self, user: Any) -> list[str]:
        return policy.roles_of(user)

    def get_customer_id(self, user: Any) -> int | None:
        customer = policy.customer_of(user)
        return customer.pk if customer else None

    def get_courier_id(self, user: Any) -> int | None:
        courier = policy.courier_of(user)
        return courier.pk if courier else None

    def get_restaurant_ids(self, user: Any) -> list[int]:
        return sorted(policy.staff_restaurant_ids(user))

    @extend_schema_field(AddressSerializer(many=True))
    def get_addresses(self, user: Any) -> list[dict[str, Any]]:
        customer = policy.customer_of(user)
        if customer is None:
            return []
        return AddressSerializer(customer.addresses.all(), many=True).data


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(
        help_text="This sign-in's key, in this answer only: send it as "
        "`Authorization: Token <key>`."
    )
    user = MeSerializer()


class SignedOutSerializer(serializers.Serializer):
    tokens_revoked = serializers.IntegerField(
        min_value=0, help_text="How many of the user's API tokens were revoked."
    )


class SocketTicketSerializer(serializers.Serializer):
    ticket = serializers.CharField(
        help_text="Opens one WebSocket, once: `wss://…/ws/…/?ticket=<ticket>`."
    )
    expires_at = serializers.DateTimeField(
        help_text="Unused after this (`SOCKET_TICKET_SECONDS` after it was issued), it opens "
        "nothing."
    )

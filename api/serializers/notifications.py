"""Web Push subscriptions, notification preferences and the VAPID key (the customer's side).

The request of ``POST /notifications/subscriptions/`` is what a browser's
``PushSubscription.toJSON()`` gives, plus an optional label; the keys are checked as RFC
8291 needs them and the endpoint as a URL the server will call
(:mod:`tracker.notifications.endpoints`), each refusal naming its field.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from tracker.notifications import endpoints
from tracker.notifications.moments import Moment


class SubscriptionKeysSerializer(serializers.Serializer):
    p256dh = serializers.RegexField(
        r"^B[A-Za-z0-9_-]{86}=?$",  # 65 bytes starting 0x04; the curve is checked below
        max_length=100,
        help_text="The browser's P-256 public key, an uncompressed point (65 bytes), base64url.",
    )
    auth = serializers.RegexField(
        r"^[A-Za-z0-9_-]{22}(==)?$",
        max_length=32,
        help_text="The browser's 16-byte authentication secret, base64url.",
    )

    def validate_p256dh(self, value: str) -> str:
        try:
            return endpoints.check_p256dh(value)
        except endpoints.Refused as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def validate_auth(self, value: str) -> str:
        try:
            return endpoints.check_auth(value)
        except endpoints.Refused as exc:
            raise serializers.ValidationError(str(exc)) from exc


class PushSubscriptionRequestSerializer(serializers.Serializer):
    """A browser's Web Push subscription (`PushSubscription.toJSON()`)."""

    endpoint = serializers.CharField(
        max_length=2048,
        help_text="The push service's URL for this browser: https, on a known browser push "
        "service (FCM, Mozilla autopush, Apple, Windows), never a private, loopback, "
        "link-local or metadata address.",
    )
    keys = SubscriptionKeysSerializer()
    expirationTime = serializers.IntegerField(  # noqa: N815 (the browser's own name)
        required=False,
        allow_null=True,
        write_only=True,
        help_text="As the browser gives it (epoch ms or null); not kept.",
    )
    label = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="What this device is called in the list (default: the User-Agent).",
    )

    def validate_endpoint(self, value: str) -> str:
        try:
            endpoints.resolve(value)
        except endpoints.Refused as exc:
            raise serializers.ValidationError(str(exc)) from exc
        return value


class PushSubscriptionSerializer(serializers.Serializer):
    """One of my Web Push subscriptions (its keys are not shown again)."""

    id = serializers.IntegerField()
    endpoint = serializers.CharField()
    label = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_success_at = serializers.DateTimeField(allow_null=True)
    last_failure_at = serializers.DateTimeField(allow_null=True)


class NotificationPreferencesSerializer(serializers.Serializer):
    """Which channels tell me about my orders, and at which moments."""

    push_enabled = serializers.BooleanField(
        required=False, help_text="Web Push to my subscribed browsers (default on)."
    )
    email_enabled = serializers.BooleanField(
        required=False, help_text="Email to my account's address (default off)."
    )
    moments = serializers.ListField(
        child=serializers.ChoiceField(choices=[m.value for m in Moment]),
        required=False,
        max_length=len(Moment),
        help_text="The moments I am told about (default: all of them).",
    )

    def validate_moments(self, value: list[str]) -> list[str]:
        return [m.value for m in Moment if m.value in value]  # once each, in lifecycle order

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "push_enabled": instance.push_enabled,
            "email_enabled": instance.email_enabled,
            "moments": list(instance.moments),
        }


class VapidKeySerializer(serializers.Serializer):
    public_key = serializers.CharField(
        help_text="The VAPID public key: pass it as `applicationServerKey` to "
        "`pushManager.subscribe()` (an uncompressed P-256 point, base64url)."
    )

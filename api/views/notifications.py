"""Notifications: my Web Push subscriptions, my preferences, the server's VAPID key.

Customers only (anyone else: 403). A subscription of another user's answers 404, as one
that does not exist. What is pushed, and when, is the notifier's
(:mod:`tracker.notifications`); these views only keep who wants it where.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from api.errors import ServiceUnavailable
from api.permissions import IsCustomer
from api.serializers.notifications import (
    NotificationPreferencesSerializer,
    PushSubscriptionRequestSerializer,
    PushSubscriptionSerializer,
    VapidKeySerializer,
)
from tracker.notifications import selectors, services, vapid
from tracker.notifications.channels import user_of_unsubscribe_token
from tracker.orders import policy

_EXAMPLE_SUBSCRIPTION = {
    "endpoint": "https://fcm.googleapis.com/fcm/send/dQw4w9WgXcQ:APA91bH",
    "keys": {
        "p256dh": "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM",
        "auth": "tBHItJI5svbpez7KI4CCXg",
    },
    "expirationTime": None,
    "label": "Chrome on Android",
}


class PushSubscriptionsView(generics.GenericAPIView):
    """My Web Push subscriptions: register this browser's, list mine."""

    permission_classes = [IsCustomer]
    serializer_class = PushSubscriptionSerializer
    throttle_scope = "writes"

    @extend_schema(
        operation_id="listPushSubscriptions",
        summary="List my Web Push subscriptions",
        description="Every browser or installed web app I registered, newest first. A "
        "subscription is deleted when its push service says it is gone, when my password "
        "changes, when I sign out everywhere and when my account is deactivated.",
        responses={200: PushSubscriptionSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        found = selectors.subscriptions_of(request.user)
        return Response(PushSubscriptionSerializer(found, many=True).data)

    @extend_schema(
        operation_id="registerPushSubscription",
        summary="Register this browser's Web Push subscription",
        description="Send what `PushSubscription.toJSON()` gives after subscribing with the "
        "server's VAPID key (`GET /api/v1/notifications/vapid-key/`). The endpoint must be "
        "https on a known browser push service and resolve only to public addresses; the "
        "keys must be a P-256 point and a 16-byte secret. 201 for a new subscription, 200 "
        "when the endpoint was registered already (its keys are replaced; one registered "
        "under another account moves to mine). At most 20 per user.",
        request=PushSubscriptionRequestSerializer,
        responses={201: PushSubscriptionSerializer, 200: PushSubscriptionSerializer},
        examples=[OpenApiExample("Chrome", _EXAMPLE_SUBSCRIPTION, request_only=True)],
    )
    def post(self, request: Request) -> Response:
        body = PushSubscriptionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        label = data.get("label") or request.headers.get("User-Agent", "")
        subscription, created = services.register(
            request.user,
            endpoint=data["endpoint"],
            p256dh=data["keys"]["p256dh"],
            auth=data["keys"]["auth"],
            label=label,
        )
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(PushSubscriptionSerializer(subscription).data, status=code)


class PushSubscriptionView(generics.GenericAPIView):
    """One of my Web Push subscriptions (another user's: 404)."""

    permission_classes = [IsCustomer]
    serializer_class = PushSubscriptionSerializer
    throttle_scope = "writes"

    def _mine(self, pk: int):
        found = selectors.subscriptions_of(self.request.user).filter(pk=pk).first()
        if found is None:
            raise NotFound(f"No push subscription {pk} of yours.")
        return found

    @extend_schema(
        operation_id="getPushSubscription",
        summary="Get one of my Web Push subscriptions",
        responses={200: PushSubscriptionSerializer},
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(PushSubscriptionSerializer(self._mine(pk)).data)

    @extend_schema(
        operation_id="deletePushSubscription",
        summary="Delete one of my Web Push subscriptions",
        description="Nothing more is pushed to that browser (signing out in a browser "
        "deletes its own). Unsubscribe in the browser too (`subscription.unsubscribe()`).",
        request=None,
        responses={204: OpenApiResponse(description="Deleted.")},
    )
    def delete(self, request: Request, pk: int) -> Response:
        if not services.remove(request.user, pk):
            raise NotFound(f"No push subscription {pk} of yours.")
        return Response(status=status.HTTP_204_NO_CONTENT)


class NotificationPreferencesView(generics.GenericAPIView):
    """Which channels tell me about my orders, and when."""

    permission_classes = [IsCustomer]
    serializer_class = NotificationPreferencesSerializer
    throttle_scope = "writes"

    @extend_schema(
        operation_id="getNotificationPreferences",
        summary="Get my notification preferences",
        description="Until changed: push on, email off, every moment.",
        responses={200: NotificationPreferencesSerializer},
    )
    def get(self, request: Request) -> Response:
        prefs = selectors.preferences_of(policy.customer_of(request.user))
        return Response(NotificationPreferencesSerializer(prefs).data)

    @extend_schema(
        operation_id="updateNotificationPreferences",
        summary="Change my notification preferences",
        description="Only the fields sent change. `moments` replaces the list; "
        "`email_enabled: true` mails my account's address.",
        request=NotificationPreferencesSerializer,
        responses={200: NotificationPreferencesSerializer},
        examples=[
            OpenApiExample(
                "Email too, only the big moments",
                {"email_enabled": True, "moments": ["out_for_delivery", "delivered"]},
                request_only=True,
            )
        ],
    )
    def patch(self, request: Request) -> Response:
        body = NotificationPreferencesSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        customer = policy.customer_of(request.user)
        prefs = services.change_preferences(customer, **body.validated_data)
        return Response(NotificationPreferencesSerializer(prefs).data)


class VapidKeyView(generics.GenericAPIView):
    """The key browsers subscribe with."""

    serializer_class = VapidKeySerializer

    @extend_schema(
        operation_id="getVapidKey",
        summary="The server's VAPID public key",
        description="The `applicationServerKey` for `pushManager.subscribe()`. 503 when Web "
        "Push is not configured on this server.",
        responses={200: VapidKeySerializer},
    )
    def get(self, request: Request) -> Response:
        if not vapid.configured():
            raise ServiceUnavailable("Web Push is not configured on this server.")
        return Response(VapidKeySerializer({"public_key": vapid.public_key()}).data)


class UnsubscribeView(generics.GenericAPIView):
    """The one-click unsubscribe of every notification email (RFC 8058): the mail's
    `List-Unsubscribe` link, signed for one user; no sign-in."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_scope = "writes"  # per client address: no user here

    @extend_schema(
        operation_id="unsubscribeEmail",
        summary="Stop notification emails (one click)",
        description="What a mail client posts for the `List-Unsubscribe` header of a "
        "notification email: turns email off for the customer the link was made for. 404 "
        "for a link that is not one of ours.",
        request=None,
        responses={204: OpenApiResponse(description="Email is off.")},
    )
    def post(self, request: Request, token: str) -> Response:
        user_id = user_of_unsubscribe_token(token)
        customer = selectors.customer_by_user(user_id) if user_id is not None else None
        if customer is None:
            raise NotFound("No such unsubscribe link.")
        services.change_preferences(customer, email_enabled=False)
        return Response(status=status.HTTP_204_NO_CONTENT)

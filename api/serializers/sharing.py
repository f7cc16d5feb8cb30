"""Shared tracking links of an order (the customer's side; the link itself opens a page and
a socket, never the API)."""

from __future__ import annotations

from rest_framework import serializers


class ShareLinkSerializer(serializers.Serializer):
    """A working link; its token is not kept, so it is not here."""

    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(
        help_text="When the link stops working as things stand: 24 hours after it was made, "
        "or 30 minutes after the order is delivered or cancelled, whichever comes first (so "
        "an active order's link may end earlier than this)."
    )


class NewShareLinkSerializer(ShareLinkSerializer):
    """A link just made: the only answer that carries its token."""

    token = serializers.CharField(
        help_text="The link's secret, shown this once (only its hash is stored). Anyone who "
        "has it can follow the delivery until the link ends or is revoked."
    )
    url = serializers.URLField(
        help_text="The page to send: `/t/{token}/` on this site, which follows the order live "
        "over `/ws/share/{token}/` without signing in."
    )

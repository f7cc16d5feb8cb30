"""The one error body every 4xx/5xx of the API has (built by :mod:`api.errors`)."""

from __future__ import annotations

from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    status = serializers.IntegerField(help_text="The HTTP status, repeated.")
    code = serializers.CharField(
        help_text="Stable machine-readable code, e.g. `invalid`, `not_authenticated`, "
        "`permission_denied`, `not_found`, `conflict`, `too_large`, `throttled`, `unavailable`."
    )
    message = serializers.CharField(help_text="A sentence to show the user.")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Only on 400: each bad field (`items[0].quantity` for nested ones) and its "
        "problems, to highlight in a form.",
    )


class ErrorSerializer(serializers.Serializer):
    """Every error answer: `{"error": {status, code, message, fields?}}`."""

    error = ErrorDetailSerializer()

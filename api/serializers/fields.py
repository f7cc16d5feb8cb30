"""Field types the API's bodies share: rounded numbers, result envelopes (money and
epoch-millisecond times: :mod:`tracker.tracking.serializers`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class RoundedFloatField(serializers.FloatField):
    def __init__(self, digits: int, **kwargs: Any) -> None:
        self.digits = digits
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: float) -> float:
        return round(float(value), self.digits)


def results_of(child: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The ``{"results": [...]}`` envelope the operations endpoints answer with."""
    return type(f"{name}Serializer", (serializers.Serializer,), {"results": child(many=True)})

"""Field types the API's bodies share: money, epoch-millisecond times, rounded numbers."""

from __future__ import annotations

from decimal import ROUND_HALF_UP
from typing import Any

from rest_framework import serializers

from tracker.tracking.formats import iso_ms, money


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
    """A Pinot time (epoch millis) as ISO-8601 UTC with milliseconds."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: int | None) -> str | None:
        return iso_ms(value)


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

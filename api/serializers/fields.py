"""Field types the API's requests and bodies share: strict text, booleans and query values,
rounded numbers, result envelopes (money and epoch-millisecond times:
:mod:`tracker.tracking.serializers`)."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
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


#: What a text field takes: anything but a NUL character (PostgreSQL cannot store it), as the
#: schema's ``pattern`` says; kept as sent (no trimming), so a string of spaces is not "blank".
NO_NUL = RegexValidator(r"^[^\x00]*$", "must not contain a NUL character")


def text(**kwargs: Any) -> dict[str, Any]:
    """Keyword arguments of a request's text field, so the schema states what it takes:
    untrimmed (``minLength`` counts what is sent) and no NUL (the ``pattern``)."""
    return {"trim_whitespace": False, "validators": [NO_NUL], **kwargs}


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only: the schema says boolean, so ``0`` or ``"yes"`` is a 400."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class QuerySerializer(serializers.Serializer):
    """Query parameters: an empty value (``?limit=``) is a 400 naming it, not "absent":
    the schema says a parameter is a non-empty string or a number."""

    def to_internal_value(self, data: Any) -> Any:
        empty = {
            name: ["may not be empty; leave the parameter out instead"]
            for name in self.fields
            if hasattr(data, "getlist") and "" in data.getlist(name)
        }
        if empty:
            raise serializers.ValidationError(empty)
        return super().to_internal_value(data)

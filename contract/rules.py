"""The contract's rule table machinery: field bounds stated once, and the generic
validation every contract record runs.

:class:`Rule` says what one field may hold beyond its type; :class:`Serializable` is the base
of the contract's dataclasses, decoding a dict, checking each field's type and then its
rules, and raising :class:`EventValidationError` naming the field at fault. The event
classes themselves, and :func:`contract.events.parse_event`, live in
:mod:`contract.events`. Standard library only, like the rest of the contract.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import types
import typing
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

#: Events more than this far ahead of the receiver's clock are refused.
MAX_CLOCK_SKEW_MS = 5 * 60 * 1000


class EventValidationError(ValueError):
    """An event failed validation; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def now_ms() -> int:
    return int(time.time() * 1000)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: reasons must stay short whatever came in."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return f"<an integer of about {value.bit_length() * 0.30103:.0f} digits>"
    except RecursionError:  # lists or objects nested deeper than repr() goes
        return f"<{type(value).__name__} nested too deep to show>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


#: Checks a value against one annotation: (field name, value) -> the normalised value.
Check = typing.Callable[[str, Any], Any]


@functools.cache
def _type_check(annotation: Any) -> Check:
    """The check of a dataclass annotation, built once per annotation: resolving the
    annotation's form on every value cost most of an event's validation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        (inner,) = [a for a in args if a is not type(None)]
        check = _type_check(inner)
        if type(None) not in args:
            return check
        return lambda name, value: None if value is None else check(name, value)
    if annotation is bool:
        return _check_bool
    if annotation is int:
        return _check_int
    if annotation is float:
        return _check_float
    if annotation is str:
        return _check_str
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        return functools.partial(_check_list, _type_check(item_type))
    if origin is dict:
        return _check_dict
    if dataclasses.is_dataclass(annotation):
        return functools.partial(_check_record, annotation)
    raise TypeError(f"unsupported annotation {annotation!r}")  # programming error


def _shown(value: Any) -> str:
    return f"got {shown(value)}"


def _type_name(value: Any) -> str:
    return f"got {type(value).__name__}"


def _instance_of(kind: type | tuple[type, ...], must: str, got: typing.Callable) -> Check:
    """A check that ``value`` is present and a ``kind`` (never a bool unless ``kind`` is)."""
    refuse_bool = kind is not bool

    def check(name: str, value: Any) -> Any:
        if value is None:
            raise EventValidationError(name, "is required")
        if (refuse_bool and isinstance(value, bool)) or not isinstance(value, kind):
            raise EventValidationError(name, f"{must}, {got(value)}")
        return value

    return check


_check_bool = _instance_of(bool, "must be a boolean", _shown)
_check_str = _instance_of(str, "must be a string", _shown)
_check_dict = _instance_of(dict, "must be an object", _type_name)
_is_int = _instance_of(int, "must be an integer", _shown)
_is_number = _instance_of((int, float), "must be a number", _shown)
_is_list = _instance_of(list, "must be a list", _type_name)


def _check_int(name: str, value: Any) -> int:
    _is_int(name, value)
    if not INT64_MIN <= value <= INT64_MAX:  # Spark and Pinot store LONG
        raise EventValidationError(name, f"must fit in 64 bits, got {shown(value)}")
    return value


def _check_float(name: str, value: Any) -> float:
    _is_number(name, value)
    try:
        number = float(value)  # an integer of hundreds of digits is no float
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise EventValidationError(name, f"must be finite, got {shown(value)}")
    return number


def _check_list(item: Check, name: str, value: Any) -> list:
    return [item(f"{name}[{i}]", v) for i, v in enumerate(_is_list(name, value))]


def _check_record(cls: Any, name: str, value: Any) -> Any:
    return cls.from_dict(_check_dict(name, value), prefix=f"{name}.")


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one field may hold beyond its type: the contract's bounds, stated once.

    The Python validator (:meth:`Serializable.validate`) and the stream job's Spark checks
    (``streaming.validation``) are both generated from these, and a test holds every bound
    to the narrowest store the value lands in (Pinot column, PostgreSQL column, Spark
    type). Bounds are inclusive. ``min``/``max`` bound a number (a money string as a
    decimal); ``max_length`` a string in characters; ``min_items``/``max_items`` a list;
    ``not_after`` names an integer field this one must not exceed; ``not_future``
    allows at most :data:`MAX_CLOCK_SKEW_MS` ahead of the receiver's clock (times are
    bounded only towards the future, so rebuilds from old topics still validate).
    """

    min: int | float | Decimal | None = None
    max: int | float | Decimal | None = None
    max_length: int | None = None
    choices: tuple[str, ...] = ()
    uuid: bool = False
    money: bool = False
    min_items: int | None = None
    max_items: int | None = None
    not_after: str | None = None
    not_future: bool = False
    #: What a value outside ``choices`` is called in the reason ("unknown status").
    what: str = "value"

    def reason(self, check: str) -> str:
        """The reason text of one check (``uuid``, ``money``, ``range``, ``length``,
        ``choices``, ``min_items``, ``max_items``, ``not_after``, ``not_future``): the
        Python validator and the Spark checks say the same."""
        if check == "range":
            if self.max is None:
                return f"must be at least {self.min}"
            if self.min is None:
                return f"must be at most {self.max}"
            return f"must be between {self.min} and {self.max}"
        return {
            "uuid": "must be a UUID",
            "money": "must be a decimal amount",
            "length": f"must be at most {self.max_length} characters",
            "choices": f"unknown {self.what}",
            "min_items": "must not be empty" if self.min_items == 1 else f"needs {self.min_items}",
            "max_items": f"must have at most {self.max_items} entries",
            "not_after": f"must not be after {self.not_after}",
            "not_future": "is in the future",
        }[check]

    def violation(self, value: Any, record: Any) -> str | None:
        """Why ``value`` (already of the field's type) breaks this rule, or None."""
        if self.uuid:
            try:
                uuid.UUID(value)
            except ValueError:
                return self.reason("uuid")
        if self.money:
            try:
                value = Decimal(value)
            except InvalidOperation:
                return self.reason("money")
            if not value.is_finite():
                return self.reason("money")
        if self.max_length is not None and len(value) > self.max_length:
            return self.reason("length")
        if self.choices and value not in self.choices:
            return f"{self.reason('choices')} {shown(value)}"
        if self.min_items is not None and len(value) < self.min_items:
            return self.reason("min_items")
        if self.max_items is not None and len(value) > self.max_items:
            return self.reason("max_items")
        if (self.min is not None and value < self.min) or (
            self.max is not None and value > self.max
        ):
            return f"{self.reason('range')}, got {shown(value)}"
        if self.not_after is not None and value > getattr(record, self.not_after):
            return self.reason("not_after")
        if self.not_future and value > now_ms() + MAX_CLOCK_SKEW_MS:
            return self.reason("not_future")
        return None


INT32_MAX = 2**31 - 1
#: Database ids (PostgreSQL bigint, Pinot LONG).
ID = Rule(min=1, max=INT64_MAX)
LATITUDE = Rule(min=-90.0, max=90.0)
LONGITUDE = Rule(min=-180.0, max=180.0)
#: Epoch milliseconds: positive, and never ahead of the receiver's clock by more than the skew.
EVENT_TIME = Rule(min=1, not_future=True)
#: An order's placement time on its status and GPS events: the stream job's watermark
#: column, so it may never be ahead of the event itself (a month-ahead value would move
#: the watermark a month ahead and drop every later event as late).
PLACED_AT = Rule(min=1, not_after="event_time")
VERSION = Rule(min=1, max=INT64_MAX)
#: Kilometres left to the door: the other side of the Earth at most.
DISTANCE = Rule(min=0.0, max=20_100.0)
#: Lines of one order and units of one line: their product (``item_count``) stays within
#: Pinot's INT; far above what the API accepts (services.MAX_LINES_PER_ORDER, ...).
MAX_LINES = 1000
MAX_QUANTITY = 1_000_000
#: A line's price and an order's total: PostgreSQL numeric(10, 2) and numeric(12, 2).
MAX_UNIT_PRICE = Decimal("99999999.99")
MAX_TOTAL = Decimal("9999999999.99")
#: Names: what PostgreSQL holds (CharField max_length) and within Pinot's 512-character STRING.
MAX_NAME = 120
MAX_CATEGORY = 60
MAX_PERSON_NAME = 301  # first (150) + " " + last (150) name of a Django user


def ruled(rule: Rule, default: Any = dataclasses.MISSING) -> Any:
    """A contract field with its rule, so each field's type and bounds are stated on one line."""
    return dataclasses.field(default=default, metadata={"rule": rule})


@functools.cache
def rules_of(cls: type) -> dict[str, Rule]:
    """Every field rule of a contract class, its bases' included, in field order (read-only)."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls) if "rule" in f.metadata}


@functools.cache
def field_specs(cls: type) -> tuple[tuple[str, Any, Any], ...]:
    """(name, resolved annotation, default) per field; resolved once per class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default) for f in dataclasses.fields(cls))


@functools.cache
def _field_checks(cls: type) -> tuple[tuple[str, Check, Any], ...]:
    """(name, :func:`_type_check`, default) per field of ``cls``."""
    return tuple((name, _type_check(hint), default) for name, hint, default in field_specs(cls))


class Serializable:
    """Shared (de)serialisation for the contract's dataclasses."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], prefix: str = "") -> Any:
        if not isinstance(data, dict):
            raise EventValidationError(prefix.rstrip(".") or "event", "must be a JSON object")
        values = {}
        for field_name, check, default in _field_checks(cls):
            if field_name not in data:
                if default is not dataclasses.MISSING:
                    values[field_name] = default
                    continue
                raise EventValidationError(prefix + field_name, "is required")
            values[field_name] = check(prefix + field_name, data[field_name])
        record = cls(**values)
        record.validate(prefix)
        return record

    def validate(self, prefix: str = "") -> None:
        """The rule table's checks beyond types, field by field in declaration order."""
        for name, rule in rules_of(type(self)).items():
            value = getattr(self, name)
            if value is not None:
                reason = rule.violation(value, self)
                if reason is not None:
                    raise EventValidationError(prefix + name, reason)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (faster than dataclasses.asdict on the GPS hot path)."""
        out = {}
        for name, _, _ in field_specs(type(self)):
            value = getattr(self, name)
            if isinstance(value, list):
                value = [v.to_dict() if isinstance(v, Serializable) else v for v in value]
            out[name] = value
        return out

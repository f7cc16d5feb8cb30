"""The event contract: every Kafka topic and every event, in one place.

Django (outbox and telemetry producers), the Spark job and the Pinot stand-in all
import this module, so a field renamed here is renamed everywhere. It depends on
the standard library only, so Spark executors and the serving layer can import
it without Django.

Conventions, chosen so that every consumer can rely on them:

* every event carries ``event_id`` (UUID4 string), ``event_time`` (epoch
  milliseconds, UTC) and ``schema_version``;
* every event is keyed by its ``order_id`` (as decimal text), so all events of
  one order land in one partition, in order, and Pinot's upsert (which needs the
  topic partitioned by primary key) holds;
* times are integers in epoch milliseconds everywhere: no string formats to
  disagree about (Python's ``isoformat`` drops zero microseconds);
* money is a decimal string in source events (the system of record is Decimal)
  and a float in enriched events, which feed analytics sums.

``parse_event`` is the single entry point for untrusted bytes; it raises
:class:`EventValidationError` naming the offending field, which the stream job
turns into a dead letter.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
import time
import types
import typing
import uuid
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, ClassVar

SCHEMA_VERSION = 1

#: Events more than this far ahead of the receiver's clock are refused.
MAX_CLOCK_SKEW_MS = 5 * 60 * 1000


class Topic(StrEnum):
    """Logical topic names; :func:`topic_name` adds the deployment's prefix."""

    ORDERS = "orders"
    ORDER_STATUSES = "order_statuses"
    DELIVERY_LOCATIONS = "delivery_locations"
    ORDERS_ENRICHED = "orders_enriched"
    DELIVERY_STATUSES = "delivery_statuses"
    ORDER_ITEMS_ENRICHED = "order_items_enriched"
    DEAD_LETTERS = "dead_letters"


SOURCE_TOPICS = (Topic.ORDERS, Topic.ORDER_STATUSES, Topic.DELIVERY_LOCATIONS)
ENRICHED_TOPICS = (Topic.ORDERS_ENRICHED, Topic.DELIVERY_STATUSES, Topic.ORDER_ITEMS_ENRICHED)


def topic_name(topic: Topic | str, prefix: str | None = None) -> str:
    """The physical topic name: ``KAFKA_TOPIC_PREFIX`` + logical name."""
    if prefix is None:
        from contract.conf import env_str

        prefix = env_str("KAFKA_TOPIC_PREFIX", "")
    return f"{prefix}{topic}"  # a StrEnum formats as its value


class OrderStatus(StrEnum):
    """The order lifecycle of the book's pizza shop, plus cancellation."""

    PLACED_ORDER = "PLACED_ORDER"
    ORDER_CONFIRMED = "ORDER_CONFIRMED"
    BEING_PREPARED = "BEING_PREPARED"
    BEING_COOKED = "BEING_COOKED"
    OUT_FOR_DELIVERY = "OUT_FOR_DELIVERY"
    ARRIVING_AT_DOOR = "ARRIVING_AT_DOOR"
    DELIVERED = "DELIVERED"
    CANCELLED = "CANCELLED"


#: The happy path, in order. Its index is the "rank" used to refuse going backwards.
LIFECYCLE: tuple[OrderStatus, ...] = (
    OrderStatus.PLACED_ORDER,
    OrderStatus.ORDER_CONFIRMED,
    OrderStatus.BEING_PREPARED,
    OrderStatus.BEING_COOKED,
    OrderStatus.OUT_FOR_DELIVERY,
    OrderStatus.ARRIVING_AT_DOOR,
    OrderStatus.DELIVERED,
)
TERMINAL_STATUSES = frozenset({OrderStatus.DELIVERED, OrderStatus.CANCELLED})
#: Cancellation is allowed only before the food leaves the restaurant.
CANCELLABLE_STATUSES = frozenset(LIFECYCLE[: LIFECYCLE.index(OrderStatus.OUT_FOR_DELIVERY)])
#: Statuses in which a courier is on the road and GPS points are expected.
IN_TRANSIT_STATUSES = frozenset({OrderStatus.OUT_FOR_DELIVERY, OrderStatus.ARRIVING_AT_DOOR})


def next_status(status: OrderStatus | str) -> OrderStatus | None:
    """The status that follows ``status`` on the happy path (None when terminal)."""
    status = OrderStatus(status)
    if status in TERMINAL_STATUSES:
        return None
    return LIFECYCLE[LIFECYCLE.index(status) + 1]


def status_rank(status: OrderStatus | str) -> int:
    """Position in the lifecycle; CANCELLED ranks after everything (it is terminal)."""
    status = OrderStatus(status)
    return len(LIFECYCLE) if status is OrderStatus.CANCELLED else LIFECYCLE.index(status)


def can_transition(current: OrderStatus | str, target: OrderStatus | str) -> bool:
    """Whether the lifecycle allows ``current`` -> ``target`` (one step, or a cancel)."""
    current, target = OrderStatus(current), OrderStatus(target)
    if target is OrderStatus.CANCELLED:
        return current in CANCELLABLE_STATUSES
    return next_status(current) is target


def status_label(status: OrderStatus | str) -> str:
    """What people read: ``OUT_FOR_DELIVERY`` -> ``Out for delivery``."""
    return OrderStatus(status).value.replace("_", " ").capitalize()


def status_time_field(status: OrderStatus | str) -> str:
    """Name of the enriched column holding when an order entered ``status``."""
    return f"{OrderStatus(status).value.lower()}_at"


STATUS_TIME_FIELDS: tuple[str, ...] = tuple(status_time_field(s) for s in OrderStatus)


class EventValidationError(ValueError):
    """An event failed validation; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def now_ms() -> int:
    return int(time.time() * 1000)


def epoch_ms(moment: datetime) -> int:
    """An aware datetime as the contract's time: integer epoch milliseconds."""
    return int(moment.timestamp() * 1000)


def new_event_id() -> str:
    return str(uuid.uuid4())


# --------------------------------------------------------------------------- validation


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: reasons must stay short whatever came in."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return f"<an integer of about {value.bit_length() * 0.30103:.0f} digits>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _check_type(name: str, value: Any, annotation: Any) -> Any:
    """Validate ``value`` against a dataclass annotation; return the normalised value."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check_type(name, value, inner)
    if value is None:
        raise EventValidationError(name, "is required")
    if annotation is bool:
        if not isinstance(value, bool):
            raise EventValidationError(name, f"must be a boolean, got {_shown(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise EventValidationError(name, f"must be an integer, got {_shown(value)}")
        if not INT64_MIN <= value <= INT64_MAX:  # Spark and Pinot store LONG
            raise EventValidationError(name, f"must fit in 64 bits, got {_shown(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EventValidationError(name, f"must be a number, got {_shown(value)}")
        try:
            number = float(value)  # an integer of hundreds of digits is no float
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise EventValidationError(name, f"must be finite, got {_shown(value)}")
        return number
    if annotation is str:
        if not isinstance(value, str):
            raise EventValidationError(name, f"must be a string, got {_shown(value)}")
        return value
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        if not isinstance(value, list):
            raise EventValidationError(name, f"must be a list, got {type(value).__name__}")
        return [_check_type(f"{name}[{i}]", item, item_type) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise EventValidationError(name, f"must be an object, got {type(value).__name__}")
        return value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise EventValidationError(name, f"must be an object, got {type(value).__name__}")
        return annotation.from_dict(value, prefix=f"{name}.")
    raise TypeError(f"unsupported annotation {annotation!r} for {name}")  # programming error


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one field may hold beyond its type: the contract's bounds, stated once.

    The Python validator (:meth:`_Record.validate`) and the stream job's Spark checks
    (``streaming.enrich``) are both generated from these, and a test holds every bound
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
            return f"{self.reason('choices')} {_shown(value)}"
        if self.min_items is not None and len(value) < self.min_items:
            return self.reason("min_items")
        if self.max_items is not None and len(value) > self.max_items:
            return self.reason("max_items")
        if (self.min is not None and value < self.min) or (
            self.max is not None and value > self.max
        ):
            return f"{self.reason('range')}, got {_shown(value)}"
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
STATUS = Rule(choices=tuple(s.value for s in OrderStatus), what="status")
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


def rules_of(cls: type) -> dict[str, Rule]:
    """Every field rule of a contract class, its bases' included, in field order."""
    merged: dict[str, Rule] = {}
    for klass in reversed(cls.__mro__):
        merged.update(klass.__dict__.get("RULES", {}))
    order = [name for name, _, _ in _field_specs(cls)]
    return {name: merged[name] for name in order if name in merged}


@functools.cache
def _field_specs(cls: type) -> tuple[tuple[str, Any, Any], ...]:
    """(name, resolved annotation, default) per field; resolved once per class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default) for f in dataclasses.fields(cls))


class _Record:
    """Shared (de)serialisation for the contract's dataclasses."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], prefix: str = "") -> Any:
        if not isinstance(data, dict):
            raise EventValidationError(prefix.rstrip(".") or "event", "must be a JSON object")
        values = {}
        for field_name, annotation, default in _field_specs(cls):
            if field_name not in data:
                if default is not dataclasses.MISSING:
                    values[field_name] = default
                    continue
                raise EventValidationError(prefix + field_name, "is required")
            values[field_name] = _check_type(prefix + field_name, data[field_name], annotation)
        record = cls(**values)
        record.validate(prefix)
        return record

    RULES: ClassVar[dict[str, Rule]] = {}

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
        for name, _, _ in _field_specs(type(self)):
            value = getattr(self, name)
            if isinstance(value, list):
                value = [v.to_dict() if isinstance(v, _Record) else v for v in value]
            out[name] = value
        return out


@dataclasses.dataclass(frozen=True)
class Event(_Record):
    """Fields common to every event on every topic."""

    TOPIC: ClassVar[Topic]

    RULES: ClassVar[dict[str, Rule]] = {
        "event_id": Rule(uuid=True),
        "event_time": EVENT_TIME,
        "order_id": ID,
    }

    event_id: str
    event_time: int
    order_id: int

    def key(self) -> bytes:
        """The Kafka message key: all events of one order share a partition."""
        return str(self.order_id).encode()

    def to_json(self) -> bytes:
        body = {"schema_version": SCHEMA_VERSION, **self.to_dict()}
        return json.dumps(body, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class OrderItem(_Record):
    """One line of an order as events carry it: product, name, category, quantity, unit price."""

    RULES: ClassVar[dict[str, Rule]] = {
        "product_id": ID,
        "name": Rule(max_length=MAX_NAME),
        "category": Rule(max_length=MAX_CATEGORY),
        "quantity": Rule(min=1, max=MAX_QUANTITY),
        "unit_price": Rule(money=True, min=Decimal(0), max=MAX_UNIT_PRICE),
    }

    product_id: int
    name: str
    category: str
    quantity: int
    unit_price: str


@dataclasses.dataclass(frozen=True)
class _OrderFacts(Event):
    """Who ordered what, from where, to where: stated once by OrderPlaced and carried
    unchanged into every OrderEnriched version."""

    customer_id: int
    customer_name: str
    restaurant_id: int
    restaurant_name: str
    restaurant_lat: float
    restaurant_lon: float
    delivery_lat: float
    delivery_lon: float
    items: list[OrderItem]

    RULES: ClassVar[dict[str, Rule]] = {
        "customer_id": ID,
        "customer_name": Rule(max_length=MAX_PERSON_NAME),
        "restaurant_id": ID,
        "restaurant_name": Rule(max_length=MAX_NAME),
        "restaurant_lat": LATITUDE,
        "restaurant_lon": LONGITUDE,
        "delivery_lat": LATITUDE,
        "delivery_lon": LONGITUDE,
        "items": Rule(max_items=MAX_LINES),
    }


@dataclasses.dataclass(frozen=True)
class OrderPlaced(_OrderFacts):
    """Topic ``orders``: everything downstream needs to know about a new order."""

    TOPIC: ClassVar[Topic] = Topic.ORDERS

    total: str

    RULES: ClassVar[dict[str, Rule]] = {
        "items": Rule(min_items=1, max_items=MAX_LINES),
        "total": Rule(money=True, min=Decimal(0), max=MAX_TOTAL),
    }


@dataclasses.dataclass(frozen=True)
class OrderStatusChanged(Event):
    """Topic ``order_statuses``: the order entered ``status`` at ``event_time``.

    ``placed_at`` is the order's placement time (its ``OrderPlaced.event_time``): the
    stream join keys its state by (order, placement time) so a watermark on that time
    bounds the state.

    ``customer_id`` and ``restaurant_id`` repeat the order's parties so the push bridge
    can route a status straight to the customer's and the restaurant's sockets without
    waiting for the stream job's join; optional, because events written before they
    existed (still in an outbox or a topic) lack them.
    """

    TOPIC: ClassVar[Topic] = Topic.ORDER_STATUSES

    placed_at: int
    status: str
    previous_status: str | None = None
    courier_id: int | None = None
    customer_id: int | None = None
    restaurant_id: int | None = None

    RULES: ClassVar[dict[str, Rule]] = {
        "placed_at": PLACED_AT,
        "status": STATUS,
        "previous_status": STATUS,
        "courier_id": ID,
        "customer_id": ID,
        "restaurant_id": ID,
    }


@dataclasses.dataclass(frozen=True)
class DeliveryLocation(Event):
    """Topic ``delivery_locations``: one GPS point of the courier carrying an order.

    ``placed_at`` is the order's placement time, as in :class:`OrderStatusChanged`.
    """

    TOPIC: ClassVar[Topic] = Topic.DELIVERY_LOCATIONS

    placed_at: int
    courier_id: int
    lat: float
    lon: float

    RULES: ClassVar[dict[str, Rule]] = {
        "placed_at": PLACED_AT,
        "courier_id": ID,
        "lat": LATITUDE,
        "lon": LONGITUDE,
    }


@dataclasses.dataclass(frozen=True)
class OrderEnriched(_OrderFacts):
    """Topic ``orders_enriched``: the latest state of one order (Pinot upsert by order_id).

    ``version`` increases with every accepted change (it may skip numbers when
    buffered events are joined at once); consumers treat a record whose
    (order_id, version) they have seen as a no-op. ``event_time`` is the time of
    the change that produced this version. ``<status>_at`` holds the time the
    order entered each status so far (None when not reached). ``item_count`` is
    the number of items (the sum of the lines' quantities).
    """

    TOPIC: ClassVar[Topic] = Topic.ORDERS_ENRICHED

    version: int
    item_count: int
    total: float
    status: str
    status_time: int
    created_at: int
    placed_order_at: int | None = None
    order_confirmed_at: int | None = None
    being_prepared_at: int | None = None
    being_cooked_at: int | None = None
    out_for_delivery_at: int | None = None
    arriving_at_door_at: int | None = None
    delivered_at: int | None = None
    cancelled_at: int | None = None
    courier_id: int | None = None
    courier_lat: float | None = None
    courier_lon: float | None = None
    location_time: int | None = None
    distance_left_km: float | None = None
    eta_seconds: int | None = None

    RULES: ClassVar[dict[str, Rule]] = {
        "version": VERSION,
        "item_count": Rule(min=0, max=MAX_LINES * MAX_QUANTITY),
        "total": Rule(min=0.0, max=float(MAX_TOTAL)),
        "status": STATUS,
        "status_time": Rule(min=1),
        "created_at": Rule(min=1),
        **{name: Rule(min=1) for name in STATUS_TIME_FIELDS},
        "courier_id": ID,
        "courier_lat": LATITUDE,
        "courier_lon": LONGITUDE,
        "location_time": Rule(min=1),
        "distance_left_km": DISTANCE,
        "eta_seconds": Rule(min=0),
    }


@dataclasses.dataclass(frozen=True)
class DeliveryStatus(Event):
    """Topic ``delivery_statuses``: a courier position of an order in transit."""

    TOPIC: ClassVar[Topic] = Topic.DELIVERY_STATUSES

    version: int
    customer_id: int
    restaurant_id: int
    courier_id: int
    status: str
    lat: float
    lon: float
    destination_lat: float
    destination_lon: float
    distance_left_km: float
    eta_seconds: int

    RULES: ClassVar[dict[str, Rule]] = {
        "version": VERSION,
        "customer_id": ID,
        "restaurant_id": ID,
        "courier_id": ID,
        "status": STATUS,
        "lat": LATITUDE,
        "lon": LONGITUDE,
        "destination_lat": LATITUDE,
        "destination_lon": LONGITUDE,
        "distance_left_km": DISTANCE,
        "eta_seconds": Rule(min=0),
    }


@dataclasses.dataclass(frozen=True)
class OrderItemEnriched(Event):
    """Topic ``order_items_enriched``: one row per order line (append-only, key order_id+line)."""

    TOPIC: ClassVar[Topic] = Topic.ORDER_ITEMS_ENRICHED

    line: int
    customer_id: int
    restaurant_id: int
    restaurant_name: str
    product_id: int
    product_name: str
    category: str
    quantity: int
    unit_price: float
    line_total: float

    RULES: ClassVar[dict[str, Rule]] = {
        "line": Rule(min=1, max=MAX_LINES),
        "customer_id": ID,
        "restaurant_id": ID,
        "restaurant_name": Rule(max_length=MAX_NAME),
        "product_id": ID,
        "product_name": Rule(max_length=MAX_NAME),
        "category": Rule(max_length=MAX_CATEGORY),
        "quantity": Rule(min=1, max=MAX_QUANTITY),
        "unit_price": Rule(min=0.0, max=float(MAX_UNIT_PRICE)),
        "line_total": Rule(min=0.0, max=float(MAX_UNIT_PRICE) * MAX_QUANTITY),
    }


@dataclasses.dataclass(frozen=True)
class DeadLetter(_Record):
    """Topic ``dead_letters``: an input that could not be used, with why and its bytes."""

    event_id: str
    event_time: int
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    key_b64: str | None
    value_b64: str

    @classmethod
    def for_message(
        cls,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> DeadLetter:
        return cls(
            event_id=new_event_id(),
            event_time=now_ms(),
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            reason=reason,
            key_b64=base64.b64encode(key).decode() if key is not None else None,
            value_b64=base64.b64encode(value or b"").decode(),
        )

    def original_value(self) -> bytes:
        return base64.b64decode(self.value_b64)

    def key(self) -> bytes | None:
        return base64.b64decode(self.key_b64) if self.key_b64 is not None else None

    def to_json(self) -> bytes:
        return json.dumps(
            {"schema_version": SCHEMA_VERSION, **self.to_dict()}, separators=(",", ":")
        ).encode()


EVENT_TYPES: dict[Topic, type[Event]] = {
    cls.TOPIC: cls
    for cls in (
        OrderPlaced,
        OrderStatusChanged,
        DeliveryLocation,
        OrderEnriched,
        DeliveryStatus,
        OrderItemEnriched,
    )
}


def parse_event(topic: Topic | str, value: bytes | str | None) -> Event:
    """Decode and validate one message of a logical ``topic``.

    Raises :class:`EventValidationError` with the field at fault for anything
    that is not a valid event of that topic: bad JSON, a missing or mistyped
    field, an unknown status, impossible coordinates, a future timestamp, or a
    schema version this code does not understand.
    """
    cls = EVENT_TYPES[Topic(topic)]
    if value is None:
        raise EventValidationError("value", "message has no value")
    try:
        data = json.loads(value)
    except RecursionError:
        raise EventValidationError("value", "not valid JSON: nested too deeply") from None
    except ValueError as exc:  # bad JSON, bad UTF-8, an integer over Python's digit limit
        raise EventValidationError("value", f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise EventValidationError("value", "must be a JSON object")
    version = data.pop("schema_version", None)
    if version is None:
        raise EventValidationError("schema_version", "is required")
    if version != SCHEMA_VERSION:
        raise EventValidationError("schema_version", f"unsupported version {_shown(version)}")
    unknown = sorted(set(data) - {name for name, _, _ in _field_specs(cls)})
    if unknown:
        raise EventValidationError(unknown[0], "is not a field of this event")
    return cls.from_dict(data)

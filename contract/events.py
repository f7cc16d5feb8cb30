"""The event contract: every Kafka topic and every event, in one place.

Django (outbox and telemetry producers), the Spark job and Pinot's table checks all
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

import dataclasses
import json
from decimal import Decimal
from typing import ClassVar

from contract.lifecycle import (
    CANCELLABLE_STATUSES,
    IN_TRANSIT_STATUSES,
    LIFECYCLE,
    STATUS_TIME_FIELDS,
    TERMINAL_STATUSES,
    OrderStatus,
    can_transition,
    next_status,
    status_label,
    status_rank,
    status_time_field,
)
from contract.messages import SCHEMA_VERSION, DeadLetter, Event, Message, epoch_ms, new_event_id
from contract.rules import (
    DISTANCE,
    ID,
    LATITUDE,
    LONGITUDE,
    MAX_CATEGORY,
    MAX_LINES,
    MAX_NAME,
    MAX_PERSON_NAME,
    MAX_QUANTITY,
    MAX_TOTAL,
    MAX_UNIT_PRICE,
    PLACED_AT,
    VERSION,
    EventValidationError,
    Rule,
    Serializable,
    field_specs,
    now_ms,
    ruled,
    shown,
)
from contract.topics import ENRICHED_TOPICS, SOURCE_TOPICS, Topic, topic_name

#: What callers import from here, wherever it is defined: the contract's one public face.
__all__ = [
    "CANCELLABLE_STATUSES", "ENRICHED_TOPICS", "EVENT_TYPES", "IN_TRANSIT_STATUSES",
    "LIFECYCLE", "SCHEMA_VERSION", "SOURCE_TOPICS", "STATUS_TIME_FIELDS", "TERMINAL_STATUSES",
    "DeadLetter", "DeliveryLocation", "DeliveryStatus", "Event", "EventValidationError",
    "Message", "OrderEnriched", "OrderItem", "OrderItemEnriched", "OrderPlaced",
    "OrderStatus", "OrderStatusChanged", "Topic", "can_transition", "epoch_ms",
    "new_event_id", "next_status", "now_ms", "parse_event", "status_label", "status_rank",
    "status_time_field", "topic_name",
]  # fmt: skip


#: An order's status, on every event that carries one.
STATUS = Rule(choices=tuple(s.value for s in OrderStatus), what="status")
#: A time the stream job stamped on an enriched record (epoch milliseconds).
MOMENT = Rule(min=1)


@dataclasses.dataclass(frozen=True)
class OrderItem(Serializable):
    """One line of an order as events carry it: product, name, category, quantity, unit price."""

    product_id: int = ruled(ID)
    name: str = ruled(Rule(max_length=MAX_NAME))
    category: str = ruled(Rule(max_length=MAX_CATEGORY))
    quantity: int = ruled(Rule(min=1, max=MAX_QUANTITY))
    unit_price: str = ruled(Rule(money=True, min=Decimal(0), max=MAX_UNIT_PRICE))


@dataclasses.dataclass(frozen=True)
class _OrderFacts(Event):
    """Who ordered what, from where, to where: stated once by OrderPlaced and carried
    unchanged into every OrderEnriched version."""

    customer_id: int = ruled(ID)
    customer_name: str = ruled(Rule(max_length=MAX_PERSON_NAME))
    restaurant_id: int = ruled(ID)
    restaurant_name: str = ruled(Rule(max_length=MAX_NAME))
    restaurant_lat: float = ruled(LATITUDE)
    restaurant_lon: float = ruled(LONGITUDE)
    delivery_lat: float = ruled(LATITUDE)
    delivery_lon: float = ruled(LONGITUDE)
    items: list[OrderItem] = ruled(Rule(max_items=MAX_LINES))


@dataclasses.dataclass(frozen=True)
class OrderPlaced(_OrderFacts):
    """Topic ``orders``: everything downstream needs to know about a new order."""

    TOPIC: ClassVar[Topic] = Topic.ORDERS

    #: The same field as the enriched order's, but an order placed has at least one line.
    items: list[OrderItem] = ruled(Rule(min_items=1, max_items=MAX_LINES))
    total: str = ruled(Rule(money=True, min=Decimal(0), max=MAX_TOTAL))


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

    placed_at: int = ruled(PLACED_AT)
    status: str = ruled(STATUS)
    previous_status: str | None = ruled(STATUS, None)
    courier_id: int | None = ruled(ID, None)
    customer_id: int | None = ruled(ID, None)
    restaurant_id: int | None = ruled(ID, None)


@dataclasses.dataclass(frozen=True)
class DeliveryLocation(Event):
    """Topic ``delivery_locations``: one GPS point of the courier carrying an order.

    ``placed_at`` is the order's placement time, as in :class:`OrderStatusChanged`.
    """

    TOPIC: ClassVar[Topic] = Topic.DELIVERY_LOCATIONS

    placed_at: int = ruled(PLACED_AT)
    courier_id: int = ruled(ID)
    lat: float = ruled(LATITUDE)
    lon: float = ruled(LONGITUDE)


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

    version: int = ruled(VERSION)
    item_count: int = ruled(Rule(min=0, max=MAX_LINES * MAX_QUANTITY))
    total: float = ruled(Rule(min=0.0, max=float(MAX_TOTAL)))
    status: str = ruled(STATUS)
    status_time: int = ruled(MOMENT)
    created_at: int = ruled(MOMENT)
    placed_order_at: int | None = ruled(MOMENT, None)
    order_confirmed_at: int | None = ruled(MOMENT, None)
    being_prepared_at: int | None = ruled(MOMENT, None)
    being_cooked_at: int | None = ruled(MOMENT, None)
    out_for_delivery_at: int | None = ruled(MOMENT, None)
    arriving_at_door_at: int | None = ruled(MOMENT, None)
    delivered_at: int | None = ruled(MOMENT, None)
    cancelled_at: int | None = ruled(MOMENT, None)
    courier_id: int | None = ruled(ID, None)
    courier_lat: float | None = ruled(LATITUDE, None)
    courier_lon: float | None = ruled(LONGITUDE, None)
    location_time: int | None = ruled(MOMENT, None)
    distance_left_km: float | None = ruled(DISTANCE, None)

    #: The stream job's fixed-speed ETA, replaced by the learned prediction
    #: (tracker.tracking.eta) that every page and API shows.
    RETIRED: ClassVar[frozenset[str]] = frozenset({"eta_seconds"})


@dataclasses.dataclass(frozen=True)
class DeliveryStatus(Event):
    """Topic ``delivery_statuses``: a courier position of an order in transit."""

    TOPIC: ClassVar[Topic] = Topic.DELIVERY_STATUSES

    version: int = ruled(VERSION)
    customer_id: int = ruled(ID)
    restaurant_id: int = ruled(ID)
    courier_id: int = ruled(ID)
    status: str = ruled(STATUS)
    lat: float = ruled(LATITUDE)
    lon: float = ruled(LONGITUDE)
    destination_lat: float = ruled(LATITUDE)
    destination_lon: float = ruled(LONGITUDE)
    distance_left_km: float = ruled(DISTANCE)

    RETIRED: ClassVar[frozenset[str]] = frozenset({"eta_seconds"})


@dataclasses.dataclass(frozen=True)
class OrderItemEnriched(Event):
    """Topic ``order_items_enriched``: one row per order line (append-only, key order_id+line)."""

    TOPIC: ClassVar[Topic] = Topic.ORDER_ITEMS_ENRICHED

    line: int = ruled(Rule(min=1, max=MAX_LINES))
    customer_id: int = ruled(ID)
    restaurant_id: int = ruled(ID)
    restaurant_name: str = ruled(Rule(max_length=MAX_NAME))
    product_id: int = ruled(ID)
    product_name: str = ruled(Rule(max_length=MAX_NAME))
    category: str = ruled(Rule(max_length=MAX_CATEGORY))
    quantity: int = ruled(Rule(min=1, max=MAX_QUANTITY))
    unit_price: float = ruled(Rule(min=0.0, max=float(MAX_UNIT_PRICE)))
    line_total: float = ruled(Rule(min=0.0, max=float(MAX_UNIT_PRICE) * MAX_QUANTITY))


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
        raise EventValidationError("schema_version", f"unsupported version {shown(version)}")
    for name in cls.RETIRED & data.keys():
        del data[name]
    unknown = sorted(set(data) - {name for name, _, _ in field_specs(cls)})
    if unknown:
        raise EventValidationError(unknown[0], "is not a field of this event")
    return cls.from_dict(data)

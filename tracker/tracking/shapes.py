"""What a client is shown of an order, as typed objects: each shape declared once.

The read model returns these; :mod:`tracker.tracking.serializers` renders them, for
REST and WebSocket alike, so both channels send the same JSON. Times are epoch
milliseconds (the contract's unit) and money a Decimal (the database) or a float
(Pinot): they become ISO-8601 strings and "18.50" only when rendered.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

#: Epoch milliseconds, UTC.
Millis = int
Money = Decimal | float


@dataclass(frozen=True, slots=True)
class Named:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class Place:
    """A restaurant: who and where."""

    id: int
    name: str
    lat: float
    lon: float


@dataclass(frozen=True, slots=True)
class DeliveryPlace:
    address: str
    lat: float
    lon: float


@dataclass(frozen=True, slots=True)
class Point:
    """A courier position and when it was taken."""

    lat: float
    lon: float
    at: Millis


@dataclass(frozen=True, slots=True)
class LineItem:
    product_id: int
    name: str
    category: str
    quantity: int
    unit_price: Money
    line_total: Money


@dataclass(frozen=True, slots=True)
class TimelineStep:
    """One lifecycle step: done, current, pending or skipped (the rest after a cancel)."""

    status: str
    label: str
    state: str
    entered_at: Millis | None
    left_at: Millis | None
    #: None while the order is still in the step (it would change with every read).
    duration_seconds: float | None


@dataclass(frozen=True, slots=True)
class TrackingSource:
    """Where the changing parts came from: "pinot", or "database" before the pipeline
    has seen the order."""

    source: str
    version: int
    updated_at: Millis


@dataclass(frozen=True, slots=True)
class EtaBasis:
    """What a prediction rests on (:func:`tracker.tracking.eta.predict`)."""

    kitchen: str | None
    kitchen_samples: int | None
    speed: str | None
    speed_kmh: float | None
    route_factor: float | None
    route_km_left: float | None
    stats_as_of: Millis | None


@dataclass(frozen=True, slots=True)
class Arrival:
    """The predicted arrival and its range, the same on every page, list and message."""

    arrives_at: Millis
    earliest: Millis
    latest: Millis
    computed_at: Millis
    basis: EtaBasis


@dataclass(frozen=True, slots=True)
class PlacedOrder:
    """What a detail shows that is fixed when the order is placed: who ordered from which
    restaurant, the lines at their prices, the total and the delivery address (the
    services never change these and the admin shows them read-only), with the owners a
    visibility check needs. Cached per process (:mod:`tracker.cache.reads`)."""

    id: int
    customer_user_id: int
    created_at: Millis
    total: Money
    items: tuple[LineItem, ...]
    restaurant: Place
    customer: Named
    delivery: DeliveryPlace


@dataclass(frozen=True, slots=True)
class OrderDetail:
    """One order: items and total from the database, tracking from Pinot."""

    id: int
    status: str
    status_label: str
    status_time: Millis
    is_active: bool
    can_cancel: bool
    created_at: Millis
    total: Money
    items: tuple[LineItem, ...]
    restaurant: Place
    customer: Named
    delivery: DeliveryPlace
    courier: Named | None
    timeline: tuple[TimelineStep, ...]
    position: Point | None
    path: tuple[Point, ...]
    distance_left_km: float | None
    eta: Arrival | None
    tracking: TrackingSource


@dataclass(frozen=True, slots=True)
class OrderUpdate:
    """An order's pushed ``update``: its state as one orders_enriched record has it (no
    items, names or trail: a client has those from its snapshot or detail)."""

    kind: str  # "status": its status moved; "position": only the courier did
    order_id: int
    customer_id: int
    restaurant_id: int
    version: int
    status: str
    status_label: str
    status_time: Millis
    status_times: dict[str, Millis]  # the statuses reached, each when it was entered
    position: Point | None
    distance_left_km: float | None
    eta: Arrival | None
    total: Money


@dataclass(frozen=True, slots=True)
class SummaryItem:
    name: str | None
    quantity: int | None


@dataclass(frozen=True, slots=True)
class OrderSummary:
    """An order in a list, from its Pinot row."""

    id: int
    status: str
    status_label: str
    status_time: Millis
    is_active: bool
    created_at: Millis
    total: Money
    item_count: int
    items: tuple[SummaryItem, ...]
    restaurant: Named
    customer: Named
    distance_left_km: float | None
    eta: Arrival | None
    version: int


@dataclass(frozen=True, slots=True)
class DeliveryInArea:
    """A delivery on the road inside an area, with the arrival its order's page shows."""

    order_id: int
    courier_id: int | None
    status: str | None
    lat: float
    lon: float
    at: Millis
    distance_left_km: float | None
    eta: Arrival | None

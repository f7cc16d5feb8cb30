"""Order commands: every write to an order goes through these functions.

The API, the admin actions and the simulator all call them, so the lifecycle
rules and the outbox are enforced in exactly one place. Each command changes
the database and enqueues its event in one transaction (no dual-write loss).
Courier GPS points are the exception by design: high-volume telemetry with no
database row, produced straight to Kafka and acknowledged once the broker has
them.

The commands are grouped by concern: ``placing`` (a new order), ``lifecycle`` (moving
and cancelling it), ``locations`` (GPS points), ``errors`` (refusals). Callers import
this package; each name has one home module.
"""

from tracker.orders.services.errors import IllegalTransition, OrderError, TelemetryError
from tracker.orders.services.lifecycle import advance_order, cancel_order
from tracker.orders.services.locations import (
    MAX_GPS_CLOCK_SKEW_MS,
    MAX_POINTS_PER_REQUEST,
    LocationPoint,
    record_locations,
)
from tracker.orders.services.placing import (
    MAX_LINES_PER_ORDER,
    MAX_QUANTITY_PER_LINE,
    ItemRequest,
    place_order,
)

__all__ = [
    "OrderError",
    "IllegalTransition",
    "TelemetryError",
    "ItemRequest",
    "MAX_LINES_PER_ORDER",
    "MAX_QUANTITY_PER_LINE",
    "place_order",
    "advance_order",
    "cancel_order",
    "LocationPoint",
    "MAX_GPS_CLOCK_SKEW_MS",
    "MAX_POINTS_PER_REQUEST",
    "record_locations",
]

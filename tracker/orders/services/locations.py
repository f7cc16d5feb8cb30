"""Courier GPS points: validated against the order, then produced straight to Kafka.

High-volume telemetry with no database row (unlike the order commands, which go through
the outbox): a point is accepted once the broker has acknowledged it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import KafkaException
from django.utils import timezone

from contract import events
from contract.events import IN_TRANSIT_STATUSES, OrderStatus, epoch_ms
from runtime import kafka
from tracker.couriers.models import Courier
from tracker.orders.models import Order
from tracker.orders.services.errors import OrderError, TelemetryError

#: A GPS fix stamped further ahead of the server's clock than this is refused. A future
#: point would become the courier's "latest" position and freeze it (and the ETA) until
#: real time caught up. Phones sync their clocks by NTP/GNSS, so seconds are plenty; the
#: event contract's own limit (events.MAX_CLOCK_SKEW_MS, 5 min) is for whole pipelines.
MAX_GPS_CLOCK_SKEW_MS = 30_000
#: GPS points one location request may carry (a phone's offline queue goes in several).
MAX_POINTS_PER_REQUEST = 500


#: One idempotent producer per process, shared by every request thread; replaced when
#: it turns fatal (its broker lost the producer's state).
telemetry = kafka.SharedProducer(**{"linger.ms": 2, "message.timeout.ms": 10_000})


@dataclass(frozen=True)
class LocationPoint:
    """One GPS point reported by ``courier`` while carrying ``order``."""

    order: Order
    courier: Courier
    lat: float
    lon: float
    at: datetime | None = None


#: The contract's name of a GPS event field -> what the client sent it as.
_POINT_FIELDS: dict[str, tuple[str, str | None]] = {
    "event_time": ("recorded_at", None),
    "placed_at": ("recorded_at", "is before the order was placed"),
}


def record_locations(positions: Sequence[LocationPoint], *, timeout: float = 10.0) -> int:
    """Publish courier GPS points straight to Kafka; return how many the broker acked.

    All points are validated before any is sent: OrderError when a courier does
    not carry the order or the order is not on the road, EventValidationError
    (naming the field) for an impossible point. TelemetryError when the broker
    did not acknowledge every point within ``timeout``; the caller may retry
    (duplicates are harmless: the stream job keeps the latest point by time).
    One flush covers the whole batch, so a simulator tick or a mobile app's
    offline buffer costs one round trip.
    """
    batch = []
    latest_allowed = epoch_ms(timezone.now()) + MAX_GPS_CLOCK_SKEW_MS
    for index, pos in enumerate(positions):
        if pos.at is not None and epoch_ms(pos.at) > latest_allowed:
            raise events.EventValidationError(
                f"[{index}].recorded_at",
                f"is more than {MAX_GPS_CLOCK_SKEW_MS // 1000} s in the future",
            )
        if pos.order.courier_id != pos.courier.pk:
            raise OrderError(
                f"order {pos.order.pk} is not assigned to this courier", field=f"[{index}].order"
            )
        if OrderStatus(pos.order.status) not in IN_TRANSIT_STATUSES:
            raise OrderError(
                f"order {pos.order.pk} is {pos.order.status}, not in transit",
                field=f"[{index}].order",
            )
        try:
            batch.append(
                events.DeliveryLocation.from_dict(
                    {
                        "event_id": str(uuid.uuid4()),
                        "event_time": epoch_ms(pos.at or timezone.now()),
                        "order_id": pos.order.pk,
                        "placed_at": epoch_ms(pos.order.created_at),
                        "courier_id": pos.courier.pk,
                        "lat": pos.lat,
                        "lon": pos.lon,
                    }
                )
            )
        except events.EventValidationError as exc:
            # Name the field the client sent: the event's times are its recorded_at (and
            # the order's placement, which only a point recorded before it contradicts).
            field, reason = _POINT_FIELDS.get(exc.field, (exc.field, exc.reason))
            raise events.EventValidationError(f"[{index}].{field}", reason or exc.reason) from None
    if not batch:
        return 0
    return _send_points(batch, timeout)


def _send_points(points: list[events.DeliveryLocation], timeout: float) -> int:
    """Send ``points``; when the producer fails (its broker lost its state), replace it
    and send the points not acknowledged again with the new one, within the same
    ``timeout``. A point in doubt may then arrive twice (the stream job keeps the latest
    point per order by time: no change)."""
    deadline = time.monotonic() + timeout
    todo, acked = list(enumerate(points)), 0
    while True:
        prod = telemetry.get()
        deliveries = kafka.Deliveries(prod)
        try:
            for index, event in todo:
                deliveries.publish(event, tag=index)
            acked += len(deliveries.flush(max(0.1, deadline - time.monotonic())))
            return acked
        except (kafka.Undelivered, KafkaException) as exc:
            telemetry.replace(prod)
            done = set(deliveries.acked)
            acked += len(done)
            todo = [(i, e) for i, e in todo if i not in done]
            time.sleep(0.2)
            if time.monotonic() >= deadline - 0.5:
                errors = getattr(exc, "errors", {})
                raise TelemetryError(
                    f"broker acknowledged {acked} of {len(points)} points"
                    + (f": {next(iter(errors.values()))}" if errors else f": {exc}")
                ) from None

"""The operators' fleet: every courier on the road, with how late its delivery runs.

Fed by the couriers' raw GPS points (the fast position path) and by the enriched records
(which say when a ride began and ended). One ``fleet`` message a second at most, each
courier in it at most once, with how late its order runs against the arrival predicted at
pickup (:func:`tracker.tracking.eta.running_late_seconds`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from contract.events import IN_TRANSIT_STATUSES, DeliveryLocation, OrderEnriched, now_ms
from contract.geo import haversine_km
from tracker.cache.maps import bounded
from tracker.live.decisions import ENDED, MAX_TRACKED_ORDERS
from tracker.live.messages import fleet_message
from tracker.tracking import eta
from tracker.tracking.formats import iso_ms

#: The operators' fleet map gets each courier at most this often (seconds).
FLEET_INTERVAL_SECONDS = 1.0

#: Couriers the fleet remembers (bounded memory; a courier reports every few seconds).
MAX_TRACKED_COURIERS = 50_000


class OnRoad(NamedTuple):
    """An order on the road, as its last enriched record described it."""

    trip: eta.Trip
    picked_up_at: int
    promised: int | None  # the arrival predicted at pickup (epoch ms)


class Fleet:
    """Which couriers the next ``fleet`` message carries, and which rides ended since."""

    def __init__(self) -> None:
        #: order -> its trip, while it is on the road
        self._trips = bounded(MAX_TRACKED_ORDERS)  # order -> OnRoad
        #: courier -> its newest point not sent yet; when it was last sent
        self._due: dict[int, DeliveryLocation] = {}
        self._sent = bounded(MAX_TRACKED_COURIERS)  # courier -> monotonic s
        self._carrying: dict[int, int] = {}  # courier -> the order it last carried
        self._gone: list[int] = []

    def follow(self, event: OrderEnriched) -> None:
        """Keep what the fleet needs of an order on the road (the arrival predicted at its
        pickup, once); forget it once delivered or cancelled, and its courier with it."""
        if event.status in IN_TRANSIT_STATUSES and event.out_for_delivery_at is not None:
            known = self._trips.get(event.order_id)
            trip = eta.Trip.of_enriched(event)
            if known is not None and known.picked_up_at == event.out_for_delivery_at:
                promised = known.promised
            else:
                promised = eta.promised_arrival(
                    trip, eta.current_statistics(), event.out_for_delivery_at
                )
            on_road = OnRoad(trip, event.out_for_delivery_at, promised)
            self._trips[event.order_id] = on_road
        elif event.status in ENDED:
            self._trips.pop(event.order_id, None)
            courier = event.courier_id
            if courier is not None and self._carrying.get(courier) == event.order_id:
                del self._carrying[courier]
                self._due.pop(courier, None)
                self._gone.append(courier)

    def moved(self, points: list[DeliveryLocation]) -> None:
        """Couriers' new points, each replacing its courier's point not sent yet."""
        for point in points:
            self._due[point.courier_id] = point
            self._carrying[point.courier_id] = point.order_id

    def forget_pending(self) -> None:
        """Drop what waits to be sent: nobody watches the fleet, and its entries (a
        prediction each) would go nowhere. An operator who opens the map sees each courier
        at its next point."""
        self._due.clear()
        self._gone = []

    def message(self, now: float) -> dict[str, Any] | None:
        """The couriers whose interval has passed at ``now`` (monotonic seconds), and those
        whose delivery ended, in one message; None when there is neither."""
        due = [
            courier
            for courier in self._due
            if now - self._sent.get(courier, -FLEET_INTERVAL_SECONDS) >= FLEET_INTERVAL_SECONDS
        ]
        if not due and not self._gone:
            return None
        couriers = [self._entry(self._due.pop(courier)) for courier in due]
        for courier in due:
            self._sent[courier] = now
        message, self._gone = fleet_message(couriers, self._gone), []
        return message

    def _entry(self, point: DeliveryLocation) -> dict[str, Any]:
        """One courier on the fleet map: where, for which order, and how late it runs."""
        on_road = self._trips.get(point.order_id)
        late = None
        if on_road is not None and on_road.promised is not None:
            here = dataclasses.replace(
                on_road.trip,
                courier=(point.lat, point.lon),
                distance_left_km=haversine_km(point.lat, point.lon, *on_road.trip.destination),
            )
            late = eta.running_late_seconds(
                here, eta.current_statistics(), now_ms(), on_road.promised
            )
        return {
            "courier_id": point.courier_id,
            "order_id": point.order_id,
            "lat": point.lat,
            "lon": point.lon,
            "at": iso_ms(point.event_time),
            "late_seconds": late,
        }

"""The WebSocket message schema, built in one place (documented in docs/api.md, "Live updates").

Every update carries the order's ``version`` (monotonic per order, set by the
stream job), so a client can drop anything older than what it has, and resume
after a reconnect with ``?since=<version>``. A ``status`` message is the fast
path's, straight from the raw status event ahead of the stream job: it has no
version, and a client applies it only when it moves the order further along the
lifecycle than what it shows. A ``position`` message is the fast path's courier
point, straight from the raw GPS event: it goes to the order's own sockets only,
and a client keeps whichever point, from it or from an ``update``, is newest by
its ``at``. A ``fleet`` message (operators only) carries the couriers that moved.
"""

from __future__ import annotations

from typing import Any

from contract.events import (
    DeliveryLocation,
    OrderEnriched,
    OrderStatus,
    OrderStatusChanged,
    now_ms,
    status_label,
    status_time_field,
)
from tracker.tracking.eta import Trip
from tracker.tracking.read_model import arrival, iso_ms, money

#: Close codes a refused or dropped socket ends with.
CLOSE_UNAUTHENTICATED = 4401  # not signed in; or, on an open socket: signed out, token
#                               revoked or expired, session flushed, user deactivated
CLOSE_NOT_FOUND = 4404  # no such order, or not yours (same as REST's 404); on an open
#                         socket: the order was reassigned away from you
CLOSE_BAD_REQUEST = 4400
CLOSE_TOO_SLOW = 4408  # the client could not keep up; reconnect with ?since=
CLOSE_UNAVAILABLE = 4503  # tracking store unreachable, or an open socket's access re-check
#                           could not run (database error); retry with backoff
CLOSE_TOO_MANY = 4429  # too many sockets, connects or messages (tracker/live/limits.py); the
#                       error message's retry_after says when to try again
CLOSE_MESSAGE_TOO_BIG = 1009  # a client message over WS_MAX_MESSAGE_BYTES (RFC 6455's code)


def order_group(order_id: int) -> str:
    return f"order.{order_id}"


def customer_group(customer_id: int) -> str:
    return f"customer.{customer_id}"


def restaurant_group(restaurant_id: int) -> str:
    """Every change to one restaurant's orders (its kitchen board)."""
    return f"restaurant.{restaurant_id}"


#: Every change to any order (the operators' page): status changes, and the fleet.
OPERATIONS_GROUP = "operations"


def user_group(user_id: int) -> str:
    """Every socket of one user: told to re-check its access when the user's changes."""
    return f"user.{user_id}"


#: Channel-layer message type asking sockets to re-check credential and access.
ACCESS_RECHECK = "access.recheck"


def update_from_enriched(event: OrderEnriched, status_changed: bool) -> dict[str, Any]:
    """An ``update`` message from one orders_enriched record (the order's full state)."""
    return {
        "type": "update",
        "kind": "status" if status_changed else "position",
        "order_id": event.order_id,
        "customer_id": event.customer_id,
        "restaurant_id": event.restaurant_id,
        "version": event.version,
        "status": event.status,
        "status_label": status_label(event.status),
        "status_time": iso_ms(event.status_time),
        "status_times": {
            s.value: iso_ms(getattr(event, status_time_field(s)))
            for s in OrderStatus
            if getattr(event, status_time_field(s)) is not None
        },
        "position": (
            {"lat": event.courier_lat, "lon": event.courier_lon, "at": iso_ms(event.location_time)}
            if event.courier_lat is not None and event.location_time is not None
            else None
        ),
        "distance_left_km": None
        if event.distance_left_km is None
        else round(event.distance_left_km, 3),
        "eta": arrival(Trip.of_enriched(event), now_ms()),
        "total": money(event.total),
    }


def status_from_event(event: OrderStatusChanged) -> dict[str, Any]:
    """A ``status`` message from one raw order_statuses event: the new status only,
    seconds before the stream job's ``update`` brings the order's full state."""
    return {
        "type": "status",
        "order_id": event.order_id,
        "customer_id": event.customer_id,
        "restaurant_id": event.restaurant_id,
        "status": event.status,
        "status_label": status_label(event.status),
        "status_time": iso_ms(event.event_time),
        "previous_status": event.previous_status,
    }


def position_from_event(event: DeliveryLocation) -> dict[str, Any]:
    """A ``position`` message from one raw delivery_locations event: the courier's
    point only, ahead of the stream job's ``update`` with distance left and ETA."""
    return {
        "type": "position",
        "order_id": event.order_id,
        "courier_id": event.courier_id,
        "position": {"lat": event.lat, "lon": event.lon, "at": iso_ms(event.event_time)},
    }


def fleet_message(couriers: list[dict[str, Any]], gone: list[int]) -> dict[str, Any]:
    """A ``fleet`` message (operators only): the couriers that moved since the last one,
    each at most once a second, and the couriers whose delivery ended."""
    return {"type": "fleet", "couriers": couriers, "gone": gone}

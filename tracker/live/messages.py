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

A shared tracking link's socket sends none of these as they are: everything it sends is
rebuilt from :data:`SHARE_ALLOW_LIST` (:func:`share_view`).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from contract.events import (
    IN_TRANSIT_STATUSES,
    DeliveryLocation,
    OrderEnriched,
    OrderStatusChanged,
    status_label,
    status_rank,
)
from contract.geo import haversine_km
from tracker.tracking import read_model
from tracker.tracking.formats import iso_ms
from tracker.tracking.serializers import (
    LatLonSerializer,
    OrderDetailSerializer,
    OrderUpdateSerializer,
    PointSerializer,
    to_json,
)

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


def order_of_group(group: str) -> int:
    """The order an :func:`order_group` is for."""
    return int(group.removeprefix("order."))


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
    """An ``update`` message from one orders_enriched record (the order's full state),
    rendered by :class:`tracker.tracking.serializers.OrderUpdateSerializer`."""
    return {"type": "update", **to_json(read_model.order_update(event, status_changed))}


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


# ---------------------------------------------------------------------- shared links

#: A field that holds a number, text, boolean or null (in :data:`SHARE_ALLOW_LIST`).
SCALAR = "scalar"

#: What a shared tracking link shows of an order (issue 56), field by field of the order's
#: own shapes (their serializers say what each field holds): the status timeline, the
#: courier's point while on the road, the distance left and the arrival window; no
#: customer, restaurant, courier, address, items, total, trail or order id. A field is
#: named here to be shared: one added to the order's shapes stays off shared links.
SHARED_DETAIL = ("status", "status_label", "status_time", "is_active", "timeline", "position",
                 "distance_left_km", "eta")  # fmt: skip
SHARED_UPDATE = ("kind", "version", "status", "status_label", "status_time", "status_times",
                 "position", "distance_left_km", "eta")  # fmt: skip
SHARED_ARRIVAL = ("arrives_at", "earliest", "latest", "computed_at")  # not what it rests on


def allow_list_of(
    serializer: serializers.Serializer,
    names: tuple[str, ...] | None = None,
    narrower: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """The allow-list spec of ``names`` (every field without it) of a serializer's shape:
    SCALAR for a value, a dict for a nested shape (``narrower[name]``: only those of its
    fields), a one-item list for a list of such."""
    fields = serializer.fields
    spec: dict[str, Any] = {}
    for name in names or tuple(fields):
        field, only = fields[name], (narrower or {}).get(name)
        if isinstance(field, serializers.ListSerializer):
            spec[name] = [allow_list_of(field.child, only)]
        elif isinstance(field, serializers.Serializer):
            spec[name] = allow_list_of(field, only)
        else:
            spec[name] = SCALAR
    return spec


#: Everything a shared tracking link's socket may send, by message type: each field a
#: message may carry (SCALAR: a number, text, boolean or null; a dict: an object with
#: these fields in turn; a one-item list: a list of such items). The order's snapshot and
#: update are the order's own shapes narrowed to :data:`SHARED_DETAIL` and
#: :data:`SHARED_UPDATE`, plus the destination rounded to about 110 m. A message is rebuilt
#: from this, never passed on with fields taken out.
SHARE_ALLOW_LIST: dict[str, dict[str, Any]] = {
    "snapshot": {
        "type": SCALAR,
        "version": SCALAR,
        "order": {
            **allow_list_of(OrderDetailSerializer(), SHARED_DETAIL, {"eta": SHARED_ARRIVAL}),
            "destination": allow_list_of(LatLonSerializer()),
        },
    },
    "update": {
        "type": SCALAR,
        **allow_list_of(OrderUpdateSerializer(), SHARED_UPDATE, {"eta": SHARED_ARRIVAL}),
    },
    "status": {"type": SCALAR, "status": SCALAR, "status_label": SCALAR, "status_time": SCALAR},
    "position": {"type": SCALAR, "position": allow_list_of(PointSerializer())},
    "heartbeat": {"type": SCALAR, "server_time": SCALAR},
    "pong": {"type": SCALAR, "server_time": SCALAR},
    "error": {"type": SCALAR, "code": SCALAR, "message": SCALAR, "retry_after": SCALAR},
}

#: Decimal places the destination is rounded to: 0.001 degree is 111 m of latitude (and
#: 108 m of longitude at Bengaluru's latitude).
DESTINATION_DECIMALS = 3
#: No courier point this close to the destination leaves a share socket, whatever the
#: status (``ARRIVING_AT_DOOR`` is on the road): a point at the door would undo the
#: rounding above. Nearly twice the rounding's cell, so the last point shown leaves the
#: door inside an area larger than the rounded destination's.
SHARE_HIDDEN_RADIUS_M = 200


def _allowed(value: Any, spec: Any) -> Any:
    """``value`` rebuilt from ``spec`` (see :data:`SHARE_ALLOW_LIST`); a value of another
    shape than the spec says becomes null."""
    if value is None:
        return None
    if spec == SCALAR:
        return value if isinstance(value, str | int | float | bool) else None
    if isinstance(spec, list):
        return [_allowed(item, spec[0]) for item in value] if isinstance(value, list) else None
    if not isinstance(value, dict):
        return None
    return {key: _allowed(value[key], inner) for key, inner in spec.items() if key in value}


def status_carried(message: dict[str, Any]) -> str | None:
    """The order status a message states (a snapshot, an update, a fast status), if any."""
    if message.get("type") == "snapshot":
        return (message.get("order") or {}).get("status")
    if message.get("type") in ("update", "status"):
        return message.get("status")
    return None


def furthest(shown: str | None, received: str | None) -> str | None:
    """The status to show of the one shown and one received: the further along."""
    if received is None:
        return shown
    if shown is None:
        return received
    return received if status_rank(received) > status_rank(shown) else shown


def destination_of(message: dict[str, Any]) -> tuple[float, float] | None:
    """The exact delivery point an order's ``snapshot`` carries (None for anything else): a
    share socket keeps it, to hold back the points near it (:func:`share_view`)."""
    if message.get("type") != "snapshot":
        return None
    delivery = (message.get("order") or {}).get("delivery") or {}
    lat, lon = delivery.get("lat"), delivery.get("lon")
    if isinstance(lat, float | int) and isinstance(lon, float | int):
        return float(lat), float(lon)
    return None


def _shareable_point(point: Any, in_transit: bool, destination: tuple[float, float] | None) -> Any:
    """``point`` while the courier is on the road and at least ``SHARE_HIDDEN_RADIUS_M``
    from the destination, else None (also when the destination is unknown)."""
    if not in_transit or destination is None or not isinstance(point, dict):
        return None
    lat, lon = point.get("lat"), point.get("lon")
    if not (isinstance(lat, float | int) and isinstance(lon, float | int)):
        return None
    near = haversine_km(lat, lon, *destination) * 1000 < SHARE_HIDDEN_RADIUS_M
    return None if near else point


def _on_the_road(
    body: dict[str, Any], in_transit: bool, destination: tuple[float, float] | None
) -> dict[str, Any]:
    """The courier's point (away from the door) and the distance left only while it is
    on the road, the distance to 100 m (with the point, a finer one would narrow down the
    door)."""
    distance = body.get("distance_left_km")
    return {
        **body,
        "position": _shareable_point(body.get("position"), in_transit, destination),
        "distance_left_km": round(distance, 1) if in_transit and distance is not None else None,
    }


def share_view(
    message: dict[str, Any],
    shown_status: str | None,
    destination: tuple[float, float] | None = None,
) -> dict[str, Any] | None:
    """What a shared link's socket sends for ``message`` (one of the order's own messages,
    or a socket message such as ``heartbeat``), given the status the link's page shows
    (:func:`furthest` of those carried so far) and the order's exact destination
    (:func:`destination_of` its snapshot; a snapshot brings its own). None: nothing (a
    type not on the list, a courier's point while the courier is not on the road or is
    within ``SHARE_HIDDEN_RADIUS_M`` of the destination, or when that is unknown)."""
    kind = message.get("type")
    spec = SHARE_ALLOW_LIST.get(kind)
    if spec is None:
        return None
    in_transit = shown_status in IN_TRANSIT_STATUSES
    destination = destination_of(message) or destination
    if kind == "position":
        if _shareable_point(message.get("position"), in_transit, destination) is None:
            return None
    elif kind == "snapshot":
        order = message.get("order") or {}
        rounded = None
        if destination is not None:
            rounded = {
                "lat": round(destination[0], DESTINATION_DECIMALS),
                "lon": round(destination[1], DESTINATION_DECIMALS),
            }
        message = {
            **message,
            "order": {**_on_the_road(order, in_transit, destination), "destination": rounded},
        }
    elif kind == "update":
        message = _on_the_road(message, in_transit, destination)
    return _allowed(message, spec)

"""The shared tracking link's socket (issue 56): authorised by the token, live, built from the
allow-list, closed by its revocation or at the link's end (by the revoke's signal or the
link's timer: the periodic re-check is a day away unless a test is about it; how soon is
bench/'s to measure).

The refusals and the allow-list need no engine (a refused socket never reaches the bridge
or the tracking store; the messages are built from the real builders and a real order).
Following an order live reads Pinot and the push bridge's Kafka, as in test_live_push.py.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.utils import timezone
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from rest_framework.test import APIClient

from config.asgi import application
from contract.events import DeliveryLocation, OrderStatusChanged, new_event_id, now_ms
from tests.factories import amake_world
from tests.fixtures_pinot import order_event_of
from tests.sockets import DEADLINE, closed_with
from tracker.live import messages
from tracker.live.consumers import TrackingSocket
from tracker.live.share_socket import ShareSocket
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.outbox.relay import Relay
from tracker.sharing import services as sharing
from tracker.sharing import tokens
from tracker.tracking import read_model
from tracker.tracking.serializers import to_json

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_periodic_recheck"),
]

ROOT = Path(__file__).resolve().parents[3]
PRIVATE = {b"referrer-policy": b"no-referrer", b"cache-control": b"no-store",
           b"x-robots-tag": b"noindex"}  # fmt: skip
#: What no message of a share socket may carry, at any depth.
FORBIDDEN = {"customer_id", "restaurant_id", "courier_id", "total", "order_id", "customer",
             "restaurant", "courier", "delivery", "address", "items", "path", "basis", "id",
             "tracking", "can_cancel", "created_at", "previous_status"}  # fmt: skip

#: Alice's order, with a courier to carry it, a shared link to it, and bob's order beside it.
WORLD = {"couriers": ("rider",), "other": True, "tokens": True, "shared": 0}


async def _open(path: str, headers: list | None = None) -> tuple[WebsocketCommunicator, dict]:
    socket = WebsocketCommunicator(application, path, headers=headers or [])
    connected, _ = await socket.connect(timeout=20)
    assert connected
    return socket, await socket.receive_json_from(timeout=20)


# ---------------------------------------------------------------------- the document


def _document() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "api" / "asyncapi.yaml").read_text())


SHARED_PAYLOADS = {"snapshot": "sharedSnapshot", "update": "sharedUpdate",
                   "status": "sharedStatus", "position": "sharedPosition",
                   "heartbeat": "heartbeat", "pong": "pong", "error": "error"}  # fmt: skip


def assert_documented_share_message(message: dict[str, Any]) -> None:
    """``message`` is one of the share channel's documented messages, exactly (the shared
    payloads admit no other field, at any depth), and carries nothing private."""
    document = _document()
    channel = {ref["$ref"].rsplit("/", 1)[-1] for ref in document["channels"]["share"]["messages"].values()}  # fmt: skip
    name = SHARED_PAYLOADS[message["type"]]
    assert name in channel
    payload = document["components"]["messages"][name]["payload"]
    assert set(message) <= set(payload["properties"]), message
    registry = Registry().with_resource(
        "urn:asyncapi", Resource.from_contents(document, DRAFT202012)
    )
    schema = json.loads(
        json.dumps({**payload, "$id": "urn:asyncapi#/x"}).replace('"#/', '"urn:asyncapi#/')
    )
    Draft202012Validator(schema, registry=registry).validate(json.loads(json.dumps(message)))

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        if isinstance(value, list):
            return {k for v in value for k in keys(v)}
        return set()

    assert not keys(message) & FORBIDDEN, message


def _paths(value: Any, prefix: str = "") -> set[str]:
    """Every field path in a message: ``order.timeline[].status`` and so on."""
    if isinstance(value, dict):
        out = set()
        for key, inner in value.items():
            out |= {f"{prefix}{key}"} | _paths(inner, f"{prefix}{key}.")
        return out
    if isinstance(value, list):
        return {p for item in value for p in _paths(item, prefix.rstrip(".") + "[].")}
    return set()


def _allowed_paths(spec: Any, prefix: str = "") -> set[str]:
    if isinstance(spec, dict):
        out = set()
        for key, inner in spec.items():
            out |= {f"{prefix}{key}"} | _allowed_paths(inner, f"{prefix}{key}.")
        return out
    if isinstance(spec, list):
        return _allowed_paths(spec[0], prefix.rstrip(".") + "[].")
    return set()


def _the_orders_own_messages(order: Order) -> list[dict[str, Any]]:
    """Every kind of message the order's own sockets get, from the real builders, the
    order on the road (its full detail from the database, a courier point, a status)."""
    courier = order.courier_id or 7
    detail = to_json(read_model.detail_as_written(order))
    detail = {**detail, "position": {"lat": 12.9801, "lon": 77.6012, "at": "2026-11-24T12:00:00.000Z"},
              "path": [{"lat": 12.97, "lon": 77.6, "at": "2026-11-24T11:59:00.000Z"}],
              "distance_left_km": 1.234}  # fmt: skip
    t0 = now_ms() - 600_000
    enriched = order_event_of(
        order, 4, "OUT_FOR_DELIVERY", created_at=t0, status_time=t0 + 300_000,
        courier=(courier, 12.97, 77.6, t0 + 310_000), distance_left_km=1.567,
    )  # fmt: skip
    changed = OrderStatusChanged(
        event_id=new_event_id(), event_time=t0 + 400_000, order_id=order.pk, placed_at=t0,
        status="ARRIVING_AT_DOOR", previous_status="OUT_FOR_DELIVERY",
        customer_id=order.customer_id, restaurant_id=order.restaurant_id,
        courier_id=courier,
    )  # fmt: skip

    point = DeliveryLocation(
        event_id=new_event_id(), event_time=t0 + 410_000, order_id=order.pk, placed_at=t0,
        courier_id=courier, lat=12.9855, lon=77.605,  # 1.2 km from the door
    )  # fmt: skip
    return [
        {"type": "snapshot", "version": 4, "order": detail},
        messages.update_from_enriched(enriched, True),
        messages.update_from_enriched(enriched, False),
        messages.status_from_event(changed),
        messages.position_from_event(point),
        {"type": "heartbeat", "server_time": time.time()},
        {"type": "pong", "server_time": time.time()},
        {"type": "error", "code": 4429, "message": "Too many.", "retry_after": 20},
        {"type": "resumed", "order_id": order.pk, "version": 4},
        {"type": "fleet", "couriers": [], "gone": []},
    ]


@pytest.fixture
def no_tracking_store(monkeypatch):
    """The predictions in these messages use the built-in defaults: no tracking store is
    asked (nothing listens on this port)."""
    monkeypatch.setenv("PINOT_BROKER_URL", "http://127.0.0.1:9")


async def test_every_field_of_every_share_message_is_on_the_allow_list(no_tracking_store):
    world = await amake_world(**WORLD, orders=("OUT_FOR_DELIVERY",))
    order = world.order
    own = await database_sync_to_async(_the_orders_own_messages)(order)
    allowed = {kind: _allowed_paths(spec) for kind, spec in messages.SHARE_ALLOW_LIST.items()}
    shown = None
    door = (order.delivery_lat, order.delivery_lon)
    sent = []
    for message in own:
        shown = messages.furthest(shown, messages.status_carried(message))
        shared = messages.share_view(message, shown, door)
        if shared is None:
            continue
        sent.append(shared)
        assert _paths(shared) <= allowed[shared["type"]], shared
        assert_documented_share_message(shared)
    assert [m["type"] for m in sent] == [
        "snapshot",
        "update",
        "update",
        "status",
        "position",
        "heartbeat",
        "pong",
        "error",
    ]  # resumed and fleet messages never leave
    snapshot = sent[0]["order"]
    # On the road: the courier's point, the destination rounded to 0.001 degree, the
    # distance to 0.1 km; the arrival window without what it rests on.
    assert snapshot["position"] == {
        "lat": 12.9801,
        "lon": 77.6012,
        "at": "2026-11-24T12:00:00.000Z",
    }
    assert snapshot["destination"] == {"lat": round(order.delivery_lat, 3),
                                       "lon": round(order.delivery_lon, 3)}  # fmt: skip
    assert snapshot["distance_left_km"] == 1.2
    assert set(snapshot["eta"]) == {"arrives_at", "earliest", "latest", "computed_at"}
    assert sent[1]["distance_left_km"] == 1.6 and sent[1]["position"]["lat"] == 12.97


async def test_no_courier_position_reaches_a_share_socket_off_the_road(no_tracking_store):
    world = await amake_world(**WORLD)  # placed: the kitchen has it
    own = await database_sync_to_async(_the_orders_own_messages)(world.order)
    snapshot, update, _, _, point = own[:5]
    placed = {**snapshot, "order": {**snapshot["order"], "status": "BEING_COOKED"}}
    shared = messages.share_view(placed, "BEING_COOKED")
    assert shared["order"]["position"] is None and shared["order"]["distance_left_km"] is None
    assert messages.share_view(point, "BEING_COOKED") is None
    assert messages.share_view(point, "DELIVERED") is None  # nor once it has arrived
    late = messages.share_view(update, "DELIVERED")  # an older update after the delivery
    assert late["position"] is None and late["distance_left_km"] is None


def _near(destination: tuple[float, float], metres: float) -> dict[str, Any]:
    """A courier point ``metres`` north of ``destination``."""
    return {"lat": destination[0] + metres / 111_195, "lon": destination[1],
            "at": "2026-11-24T12:00:00.000Z"}  # fmt: skip


async def test_no_courier_point_near_the_destination_reaches_a_share_socket(
    no_tracking_store, monkeypatch
):
    """The destination is rounded to about 110 m; a point at the door would undo that. The
    share socket keeps every point within ``SHARE_HIDDEN_RADIUS_M`` (200 m) of the
    destination to itself, whatever the status (``ARRIVING_AT_DOOR`` is on the road)."""
    world = await amake_world(**WORLD, orders=("OUT_FOR_DELIVERY",))
    order = world.order
    door = (order.delivery_lat, order.delivery_lon)
    own = await database_sync_to_async(_the_orders_own_messages)(order)
    snapshot, update, _, _, point = own[:5]
    sent: list[dict[str, Any]] = []

    async def capture(self, content, close=False):
        sent.append(content)

    monkeypatch.setattr(TrackingSocket, "send_json", capture)
    socket = ShareSocket()
    arriving = {**snapshot["order"], "status": "ARRIVING_AT_DOOR", "position": _near(door, 50)}
    await socket.send_json({**snapshot, "order": arriving})
    assert sent[-1]["order"]["position"] is None
    assert sent[-1]["order"]["destination"] == {"lat": round(door[0], 3), "lon": round(door[1], 3)}
    await socket.send_json({**update, "status": "ARRIVING_AT_DOOR", "position": _near(door, 150)})
    assert sent[-1]["type"] == "update" and sent[-1]["position"] is None
    shown = len(sent)
    await socket.send_json({**point, "position": _near(door, 190)})
    assert len(sent) == shown  # a position message near the door is not sent at all
    await socket.send_json({**point, "position": _near(door, 400)})
    assert sent[-1]["type"] == "position" and sent[-1]["position"]["lat"] > door[0]


# ---------------------------------------------------------------------- refusals (no engine)


async def test_guessed_malformed_revoked_and_expired_links_are_refused_alike(no_push_bridge):
    world = await amake_world(**WORLD)
    alice = world.alice.user

    @database_sync_to_async
    def dead_links() -> list[str]:
        _, revoked = sharing.create_link(world.order.pk, by=alice)
        sharing.revoke_links(world.order.pk, by=alice)
        _, old = sharing.create_link(
            world.order.pk, by=alice, at=timezone.now() - timedelta(hours=25)
        )
        return [revoked, old]

    revoked, old = await dead_links()
    guessed = tokens.new_token()
    reasons = set()
    for path in (f"/ws/share/{guessed}/", f"/ws/share/{revoked}/", f"/ws/share/{old}/",
                 "/ws/share/short/", f"/ws/share/{guessed}/more/", f"/ws/share/{guessed}"):  # fmt: skip
        socket, first = await _open(path)
        assert first["type"] == "error" and first["code"] == messages.CLOSE_NOT_FOUND, path
        assert await socket.receive_output(timeout=5) == {
            "type": "websocket.close",
            "code": messages.CLOSE_NOT_FOUND,
        }
        reasons.add(first["message"])
    assert len(reasons) == 1  # nothing tells a revoked or ended link from a guess


async def test_the_handshake_answers_with_the_private_headers(no_push_bridge):
    socket = WebsocketCommunicator(application, f"/ws/share/{tokens.new_token()}/")
    assert (await socket.connect(timeout=10))[0]
    assert {name: value for name, value in socket.response_headers if name in PRIVATE} == PRIVATE
    await socket.receive_output(timeout=5)  # the refusal
    # The order sockets keep their plain handshake.
    plain = WebsocketCommunicator(application, "/ws/orders/")
    assert (await plain.connect(timeout=10))[0]
    assert plain.response_headers == []


async def test_share_socket_connects_are_limited_per_address_before_the_lookup(
    no_push_bridge, settings
):
    settings.SHARE_CONNECT_RATE = "2/min"
    settings.TRUSTED_PROXY_COUNT = 1  # the address is the proxy's X-Forwarded-For entry
    world = await amake_world(**WORLD)
    for _ in range(2):
        _, first = await _open(f"/ws/share/{tokens.new_token()}/")
        assert first["code"] == messages.CLOSE_NOT_FOUND
    _, limited = await _open(f"/ws/share/{world.share_token}/")  # a good link, spent budget
    assert limited["code"] == messages.CLOSE_TOO_MANY and limited["retry_after"] >= 1
    _, elsewhere = await _open(  # another address has its own budget
        f"/ws/share/{tokens.new_token()}/", [(b"x-forwarded-for", b"10.0.0.9")]
    )
    assert elsewhere["code"] == messages.CLOSE_NOT_FOUND


async def test_a_link_has_a_bounded_number_of_open_sockets(no_push_bridge, settings):
    """The slots are taken before the snapshot: with every slot held, the next socket is
    refused with 4429 without reading any tracking data."""
    from tracker.live import limits

    settings.SHARE_MAX_SOCKETS_PER_LINK = 2
    world = await amake_world(**WORLD)
    held = [limits.SocketSlots(f"share-{world.link.pk}", f"other-{n}", 2) for n in range(2)]
    assert all([await database_sync_to_async(slot.claim)() for slot in held])
    _, refused = await _open(f"/ws/share/{world.share_token}/")
    assert refused["code"] == messages.CLOSE_TOO_MANY and "at most 2" in refused["message"]


async def test_share_sockets_count_against_the_link_creators_socket_cap(no_push_bridge, settings):
    """A link's sockets are its creator's: with every one of the creator's socket slots
    held, the link's next socket is refused with 4429 (5 links x 10 sockets each would
    otherwise be 50 sockets of one customer, 24 h each)."""
    from tracker.live import limits

    settings.WS_MAX_SOCKETS_PER_USER = 2
    world = await amake_world(**WORLD)
    alice = world.alice.user
    held = [limits.SocketSlots(alice.pk, f"app-{n}") for n in range(2)]
    assert all([await database_sync_to_async(slot.claim)() for slot in held])
    _, refused = await _open(f"/ws/share/{world.share_token}/")
    assert refused["code"] == messages.CLOSE_TOO_MANY, refused
    await database_sync_to_async(held[0].release)()
    _, refused = await _open(f"/ws/share/{world.share_token}/")  # a slot free: the link's now
    assert refused["code"] != messages.CLOSE_TOO_MANY, refused


async def test_a_share_socket_sleeps_until_its_links_end(no_push_bridge, monkeypatch):
    """The timer to the link's end sleeps until that end (or until the order ends or a
    re-check moves the end), not a second at a time."""
    import asyncio
    from unittest.mock import AsyncMock

    from tracker.sharing import selectors

    world = await amake_world(**WORLD)
    holder = await database_sync_to_async(selectors.holder_for_digest)(
        tokens.digest(world.share_token)
    )
    socket = ShareSocket()
    socket.viewer = holder
    socket._wake = asyncio.Event()
    socket.delivery = type("Delivery", (), {"closing": False, "recheck": AsyncMock()})()
    timeouts = []

    async def wait_for(awaitable, timeout):
        awaitable.close()
        timeouts.append(timeout)
        raise asyncio.CancelledError

    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    with pytest.raises(asyncio.CancelledError):
        await socket._close_at_the_end()
    left = (holder.ends_at - timezone.now()).total_seconds()
    assert timeouts and timeouts[0] > left - 5, timeouts  # the whole way to the end


# ---------------------------------------------------------------------- live (Pinot, Kafka)


@database_sync_to_async
def _relay() -> None:
    relay = Relay()
    while relay.publish_batch():
        pass


async def _next_shared(socket: WebsocketCommunicator, timeout: float = 10) -> dict[str, Any]:
    """The next message other than a heartbeat, checked against the document."""
    while True:
        message = await socket.receive_json_from(timeout=timeout)
        assert_documented_share_message(message)
        if message["type"] != "heartbeat":
            return message


async def test_a_shared_link_follows_its_order_live_and_nothing_else(pinot, asgi_lifespan):
    world = await amake_world(**WORLD, orders=("OUT_FOR_DELIVERY",))
    order, other = world.order, world.other
    t0 = now_ms() - 60_000
    on_road = {"created_at": t0, "status_time": t0 + 30_000}
    await pinot.apublish(
        order_event_of(order, 1, "OUT_FOR_DELIVERY", **on_road,
                       courier=(order.courier_id, 12.9719, 77.6412, t0 + 31_000),
                       distance_left_km=4.234),
        order_event_of(other, 1, created_at=t0),
    )  # fmt: skip
    socket, snapshot = await _open(f"/ws/share/{world.share_token}/")
    assert_documented_share_message(snapshot)
    shared = snapshot["order"]
    assert shared["status"] == "OUT_FOR_DELIVERY" and shared["position"]["lat"] == 12.9719
    assert shared["distance_left_km"] == 4.2
    assert shared["destination"] == {"lat": round(order.delivery_lat, 3),
                                     "lon": round(order.delivery_lon, 3)}  # fmt: skip
    # The record states when it was placed and went out: the steps between have no time,
    # and show as pending, as on the customer's own page.
    states = [step["state"] for step in shared["timeline"]]
    assert states[0] == "done" and states[4] == "current" and set(states[5:]) == {"pending"}
    assert shared["timeline"][4]["status"] == "OUT_FOR_DELIVERY"

    # The courier moves (the stream job's update, then a raw point on the fast path).
    await pinot.apublish(
        order_event_of(order, 2, "OUT_FOR_DELIVERY", **on_road,
                       courier=(order.courier_id, 12.9650, 77.6300, now_ms()),
                       distance_left_km=2.61),
    )  # fmt: skip
    update = await _next_shared(socket)
    # (its kind is "status": the bridge started after version 1, so this is the first it saw)
    assert (update["type"], update["version"], update["status"]) == (
        "update",
        2,
        "OUT_FOR_DELIVERY",
    )
    assert update["position"]["lat"] == 12.965 and update["distance_left_km"] == 2.6
    point = services.LocationPoint(order=order, courier=order.courier, lat=12.97, lon=77.61)
    assert await database_sync_to_async(services.record_locations)([point]) == 1
    moved = await _next_shared(socket)
    assert moved == {"type": "position", "position": {**moved["position"], "lat": 12.97}}

    # Another order changes: nothing of it reaches this socket.
    await pinot.apublish(order_event_of(other, 2, "ORDER_CONFIRMED", created_at=t0))
    assert await socket.receive_nothing(timeout=1)

    # The courier arrives (the fast status path, then the delivery).
    await database_sync_to_async(services.advance_order)(order.pk, by=SYSTEM)
    await _relay()
    status = await _next_shared(socket)
    assert status["type"] == "status" and status["status"] == "ARRIVING_AT_DOOR"
    await socket.send_json_to({"type": "ping"})
    assert (await _next_shared(socket))["type"] == "pong"
    await socket.disconnect()


async def test_revoking_a_link_closes_its_open_socket(pinot, asgi_lifespan):
    world = await amake_world(**WORLD, orders=("OUT_FOR_DELIVERY",))
    order = world.order
    await pinot.apublish(order_event_of(order, 1, "OUT_FOR_DELIVERY"))
    shared, first = await _open(f"/ws/share/{world.share_token}/")
    assert first["type"] == "snapshot"
    owners, _ = await _open(
        f"/ws/orders/{order.pk}/", [(b"authorization", f"Token {world.tokens['alice']}".encode())]
    )

    def stop_sharing() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {world.tokens['alice']}")
        assert client.delete(f"/api/v1/orders/{order.pk}/share/").status_code == 204

    await database_sync_to_async(stop_sharing)()
    error = await closed_with(shared, messages.CLOSE_NOT_FOUND)
    assert "revoked" in error["message"]
    assert await owners.receive_nothing(timeout=0.5)  # the customer still follows it
    await owners.disconnect()
    # And it cannot come back.
    _, again = await _open(f"/ws/share/{world.share_token}/")
    assert again["code"] == messages.CLOSE_NOT_FOUND


async def test_a_link_closes_its_socket_at_its_end_and_not_before(pinot, settings, asgi_lifespan):
    settings.SHARE_LINK_MAX_AGE = timedelta(hours=1)
    world = await amake_world(**WORLD)
    await pinot.apublish(order_event_of(world.order, 1))

    @database_sync_to_async
    def ending_soon() -> tuple[str, Any]:
        made = timezone.now() - timedelta(hours=1) + timedelta(seconds=3)
        link, token = sharing.create_link(world.order.pk, by=world.alice.user, at=made)
        return token, link.expires_at

    token, ends = await ending_soon()
    socket, first = await _open(f"/ws/share/{token}/")
    assert first["type"] == "snapshot"
    left = (ends - timezone.now()).total_seconds()
    await closed_with(socket, messages.CLOSE_NOT_FOUND, within=left + DEADLINE)
    assert timezone.now() >= ends


async def test_the_orders_end_closes_its_links_sockets_after_the_grace(
    pinot, settings, asgi_lifespan
):
    settings.SHARE_LINK_GRACE = timedelta(0)
    world = await amake_world(**WORLD, orders=("OUT_FOR_DELIVERY",))
    order = world.order
    await pinot.apublish(order_event_of(order, 1, "OUT_FOR_DELIVERY"))
    socket, _ = await _open(f"/ws/share/{world.share_token}/")
    for _ in range(2):  # arriving, delivered
        await database_sync_to_async(services.advance_order)(order.pk, by=SYSTEM)
    await _relay()
    while True:  # the statuses may arrive first; then the close
        message = await socket.receive_json_from(timeout=DEADLINE)
        assert_documented_share_message(message)
        if message["type"] == "error":
            assert message["code"] == messages.CLOSE_NOT_FOUND
            break
    assert await socket.receive_output(timeout=DEADLINE) == {
        "type": "websocket.close",
        "code": messages.CLOSE_NOT_FOUND,
    }


async def test_a_recheck_that_cannot_run_closes_the_share_socket(pinot, settings, asgi_lifespan):
    settings.PUSH_RECHECK_SECONDS = 0.3
    world = await amake_world(**WORLD)
    await pinot.apublish(order_event_of(world.order, 1))
    socket, _ = await _open(f"/ws/share/{world.share_token}/")

    def rename(old: str, new: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"')

    await database_sync_to_async(rename)("sharing_sharelink", "sharing_sharelink_away")
    try:
        await closed_with(socket, messages.CLOSE_UNAVAILABLE)
    finally:
        await database_sync_to_async(rename)("sharing_sharelink_away", "sharing_sharelink")


async def test_the_share_token_opens_no_other_socket(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    order = world.order
    await pinot.apublish(order_event_of(order, 1))
    for path, headers in [
        (f"/ws/orders/{order.pk}/?token={world.share_token}", []),
        (f"/ws/orders/{order.pk}/", [(b"authorization", f"Token {world.share_token}".encode())]),
        ("/ws/orders/", [(b"authorization", f"Token {world.share_token}".encode())]),
        (f"/ws/restaurants/{order.restaurant_id}/?token={world.share_token}", []),
    ]:
        _, first = await _open(path, headers)
        assert first["code"] == messages.CLOSE_UNAUTHENTICATED, path

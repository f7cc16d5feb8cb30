"""The courier's socket on the real tracking store (issue 56, item 1): the deliveries the
courier carries now, every change to them, and a fresh snapshot when one is assigned, taken
away or finished, for the socket's whole life.

Reads Pinot and the push bridge's Kafka, as tests/integration/live/test_live_push.py does; the refusals and
the notices that need no engine are in tests/unit/live/test_courier_page.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application
from contract.events import now_ms
from tests.factories import amake_world
from tests.fixtures_pinot import order_event_of
from tests.sockets import DEADLINE
from tracker.live import messages
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.outbox.relay import Relay

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_periodic_recheck"),
]

#: Alice's three orders out of the kitchen, the first carried by rider1; rider2 idle.
WORLD = {
    "restaurant": "Indiranagar Pizza Co.",
    "orders": ("OUT_FOR_DELIVERY", "BEING_COOKED", "BEING_COOKED"),
    "couriers": ("rider1", "rider2"),
}

ROOT = Path(__file__).resolve().parents[3]


def _session(username: str) -> list:
    browser = Client()
    assert browser.login(username=username, password=f"pw-{username}")
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()
    return [(b"cookie", cookie), (b"origin", b"http://127.0.0.1:8000")]


async def _open(username: str) -> tuple[WebsocketCommunicator, dict]:
    socket = WebsocketCommunicator(
        application, "/ws/courier/", headers=await database_sync_to_async(_session)(username)
    )
    assert (await socket.connect(timeout=20))[0]
    return socket, await socket.receive_json_from(timeout=20)


async def _next(socket: WebsocketCommunicator, timeout: float = 10) -> dict[str, Any]:
    """The next message other than a heartbeat."""
    while True:
        message = await socket.receive_json_from(timeout=timeout)
        if message["type"] != "heartbeat":
            return message


async def _next_snapshot(socket: WebsocketCommunicator, timeout: float = DEADLINE) -> dict:
    """The next snapshot, within ``timeout``: what comes before it of the deliveries it
    replaces (their own updates) is skipped."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, "no new snapshot in time"
        message = await _next(socket, timeout=left)
        if message["type"] == "snapshot":
            return message


@database_sync_to_async
def _relay() -> None:
    relay = Relay()
    while relay.publish_batch():
        pass


def _road(order: Order, version: int, point: tuple[float, float], t0: int, **extra):
    return order_event_of(
        order, version, "OUT_FOR_DELIVERY", created_at=t0, status_time=t0 + 30_000,
        courier=(order.courier_id, *point, now_ms()), distance_left_km=3.2, **extra,
    )  # fmt: skip


def _documented_snapshot(message: dict[str, Any]) -> None:
    """The courier channel's snapshot, as api/asyncapi.yaml says: its orders are details."""
    document = yaml.safe_load((ROOT / "api" / "asyncapi.yaml").read_text())
    ref = document["channels"]["courier"]["messages"]["snapshot"]["$ref"]
    payload = document["components"]["messages"][ref.rsplit("/", 1)[-1]]["payload"]
    assert set(message) == set(payload["properties"]) == {"type", "orders"}
    detail_fields = {"id", "status", "restaurant", "delivery", "customer", "courier", "position",
                     "eta", "distance_left_km", "timeline", "tracking", "items", "created_at"}  # fmt: skip
    for order in message["orders"]:
        assert detail_fields <= set(order), set(order) ^ detail_fields


async def test_the_courier_follows_the_deliveries_they_carry_and_only_those(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    first_order, second_order, other = world.orders
    t0 = now_ms() - 120_000
    await pinot.apublish(
        _road(first_order, 1, (12.9719, 77.6412), t0),
        order_event_of(second_order, 1, "BEING_COOKED", created_at=t0),
        order_event_of(other, 1, "BEING_COOKED", created_at=t0),
    )
    socket, snapshot = await _open("rider1")
    _documented_snapshot(snapshot)
    [shown] = snapshot["orders"]
    assert shown["id"] == first_order.pk and shown["status"] == "OUT_FOR_DELIVERY"
    assert shown["restaurant"]["name"] == "Indiranagar Pizza Co."
    assert shown["delivery"]["address"] == first_order.delivery_address
    assert shown["position"]["lat"] == 12.9719

    # Its own point comes back on the fast path; the stream job's update follows.
    point = services.LocationPoint(first_order, first_order.courier, 12.9700, 77.6300)
    assert await database_sync_to_async(services.record_locations)([point]) == 1
    moved = await _next(socket)
    assert moved["type"] == "position" and moved["order_id"] == first_order.pk
    assert moved["position"]["lat"] == 12.97
    await pinot.apublish(_road(first_order, 2, (12.9700, 77.6300), t0))
    update = await _next(socket)
    assert (update["type"], update["order_id"], update["version"]) == ("update", first_order.pk, 2)

    # Another order changes: nothing of it reaches this socket.
    await pinot.apublish(order_event_of(other, 2, "OUT_FOR_DELIVERY", created_at=t0))
    assert await socket.receive_nothing(timeout=1)

    # A second delivery is handed to the courier: a fresh snapshot (its signal's, not a
    # periodic re-check's).
    await database_sync_to_async(services.advance_order)(
        second_order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=world.couriers[0]
    )
    both = await _next_snapshot(socket)
    _documented_snapshot(both)
    assert sorted(o["id"] for o in both["orders"]) == sorted([first_order.pk, second_order.pk])

    # The first is taken away (given to another courier): it leaves, and it reaches them.
    theirs, theirs_first = await _open("rider2")
    assert theirs_first == {"type": "snapshot", "orders": []}
    await database_sync_to_async(services.advance_order)(
        first_order.pk, by=SYSTEM, to="ARRIVING_AT_DOOR", courier=world.couriers[1]
    )
    left = await _next_snapshot(socket)
    assert [o["id"] for o in left["orders"]] == [second_order.pk]
    gained = await _next_snapshot(theirs)
    assert [o["id"] for o in gained["orders"]] == [first_order.pk]

    # Its changes no longer reach the first courier; the second's do.
    await _relay()
    await pinot.apublish(_road(first_order, 3, (12.9710, 77.6200), t0))
    update = await _next(theirs)
    assert update["order_id"] == first_order.pk
    assert all(
        m.get("order_id") != first_order.pk
        for m in await _drain(socket, 1.0)
        if m["type"] != "snapshot"
    )
    await socket.disconnect()
    await theirs.disconnect()


async def test_a_finished_delivery_leaves_at_the_next_periodic_recheck(
    pinot, settings, asgi_lifespan
):
    settings.PUSH_RECHECK_SECONDS = 0.5
    world = await amake_world(**WORLD)
    order = world.orders[0]
    t0 = now_ms() - 120_000
    await pinot.apublish(_road(order, 1, (12.9719, 77.6412), t0))
    socket, snapshot = await _open("rider1")
    assert [o["id"] for o in snapshot["orders"]] == [order.pk]

    def deliver() -> None:
        for status in ("ARRIVING_AT_DOOR", "DELIVERED"):
            services.advance_order(order.pk, by=world.couriers[0].user, to=status, via="api")

    await database_sync_to_async(deliver)()
    await _relay()
    empty = await _next_snapshot(socket)
    assert empty == {"type": "snapshot", "orders": []}
    await socket.disconnect()


async def test_signing_out_closes_the_couriers_socket(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    await pinot.apublish(_road(world.orders[0], 1, (12.9719, 77.6412), now_ms() - 60_000))
    browser = Client()
    await database_sync_to_async(browser.force_login)(world.couriers[0].user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()
    socket = WebsocketCommunicator(
        application,
        "/ws/courier/",
        headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1:8000")],
    )
    assert (await socket.connect(timeout=20))[0]
    assert (await socket.receive_json_from(timeout=20))["type"] == "snapshot"
    await database_sync_to_async(browser.post)("/accounts/logout/")
    error = await socket.receive_json_from(timeout=DEADLINE)
    assert error["code"] == messages.CLOSE_UNAUTHENTICATED


async def _drain(socket: WebsocketCommunicator, seconds: float) -> list[dict[str, Any]]:
    """Every message within ``seconds``. Waits with ``receive_nothing``: a receive that times
    out would cancel the socket's application (asgiref's communicator does)."""
    import json

    got = []
    while not await socket.receive_nothing(timeout=seconds):
        got.append(json.loads((await socket.receive_output())["text"]))
    return got

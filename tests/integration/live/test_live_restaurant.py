"""The kitchen board's socket and the operators' feed: scoped like REST, for their whole life.

A restaurant's staff follow ``/ws/restaurants/<id>/`` for their own restaurant only
(another's looks absent, 4404, as in REST); operators may follow any. Removing a
member from the staff closes their board socket (its signal does: the periodic re-check
is a day away here). Real parts: the
broker, the local Pinot server and the embedded push bridge.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient

from config.asgi import application
from contract.events import now_ms
from tests.factories import amake_world
from tests.fixtures_pinot import order_event_of
from tests.sockets import DEADLINE
from tracker.live import messages

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_periodic_recheck"),
]

#: Alice's orders at two restaurants, each with its cook ("cook", "curry-cook"); an
#: operator; their tokens.
WORLD = {
    "restaurant": "Pizza Place",
    "second_restaurant": "Curry House",
    "cooks": True,
    "operator": True,
    "tokens": True,
}


async def _connect(path: str, token: str) -> tuple[WebsocketCommunicator, dict]:
    socket = WebsocketCommunicator(
        application, path, headers=[(b"authorization", f"Token {token}".encode())]
    )
    connected, _ = await socket.connect(timeout=20)
    assert connected
    return socket, await socket.receive_json_from(timeout=20)


async def test_staff_follow_their_own_restaurants_orders_and_never_anothers(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    t0 = now_ms() - 60_000
    await pinot.apublish(
        order_event_of(world.order, 1, created_at=t0),
        order_event_of(world.second_order, 1, created_at=t0),
    )
    pizza_path = f"/ws/restaurants/{world.restaurant.pk}/"
    board, snapshot = await _connect(pizza_path, world.tokens["cook"])
    assert snapshot["type"] == "snapshot" and snapshot["restaurant_id"] == world.restaurant.pk
    assert [o["id"] for o in snapshot["orders"]] == [world.order.pk]

    for who in ("curry-cook", "alice"):  # another restaurant's staff; a customer
        refused, error = await _connect(pizza_path, world.tokens[who])
        assert error["type"] == "error" and error["code"] == messages.CLOSE_NOT_FOUND
        await refused.disconnect()
    ops_board, ops_snapshot = await _connect(pizza_path, world.tokens["ops"])
    assert [o["id"] for o in ops_snapshot["orders"]] == [world.order.pk]
    missing, error = await _connect("/ws/restaurants/999999/", world.tokens["ops"])
    assert error["code"] == messages.CLOSE_NOT_FOUND

    # A change to the other restaurant's order never reaches this board; its own does.
    await pinot.apublish(
        order_event_of(world.second_order, 2, "ORDER_CONFIRMED", created_at=t0),
        order_event_of(world.order, 2, "ORDER_CONFIRMED", created_at=t0),
    )
    update = await board.receive_json_from(timeout=10)
    assert (update["order_id"], update["status"], update["restaurant_id"]) == (
        world.order.pk,
        "ORDER_CONFIRMED",
        world.restaurant.pk,
    )
    assert await board.receive_nothing(timeout=1)
    assert (await ops_board.receive_json_from(timeout=10))["order_id"] == world.order.pk
    for socket in (board, ops_board, missing):
        await socket.disconnect()


async def test_leaving_the_staff_closes_the_board_socket(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    await pinot.apublish(order_event_of(world.order, 1))
    board, _ = await _connect(f"/ws/restaurants/{world.restaurant.pk}/", world.tokens["cook"])

    @database_sync_to_async
    def leave():
        world.restaurant.staff.remove(world.cook)

    await leave()
    error = await board.receive_json_from(timeout=DEADLINE)
    assert error == {
        "type": "error",
        "code": messages.CLOSE_NOT_FOUND,
        "message": "No such restaurant.",
    }
    assert await board.receive_output(timeout=DEADLINE) == {
        "type": "websocket.close",
        "code": messages.CLOSE_NOT_FOUND,
    }


async def test_operations_feed_is_for_operators_and_carries_every_status_change(
    pinot, asgi_lifespan
):
    world = await amake_world(**WORLD)
    t0 = now_ms() - 60_000
    feed, snapshot = await _connect("/ws/operations/", world.tokens["ops"])
    assert snapshot == {"type": "snapshot"}
    refused, error = await _connect("/ws/operations/", world.tokens["cook"])
    assert error["code"] == messages.CLOSE_NOT_FOUND
    await pinot.apublish(
        order_event_of(world.order, 1, created_at=t0),
        order_event_of(world.second_order, 1, created_at=t0),
    )
    seen = set()
    while len(seen) < 2:  # the feed also carries the pipeline strip's samples
        message = await feed.receive_json_from(timeout=10)
        if message["type"] != "pipeline":
            seen.add(message["order_id"])
    assert seen == {world.order.pk, world.second_order.pk}
    await feed.disconnect()


@database_sync_to_async
def _rest(token: str, method: str, path: str, **data):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return getattr(client, method)(path, data or None, format="json")


async def test_rest_keeps_staff_to_their_own_restaurant(pinot):
    world = await amake_world(**WORLD)
    curry_order = world.second_order
    pizza = world.tokens["cook"]
    await pinot.apublish(order_event_of(curry_order, 1), order_event_of(world.order, 1))
    listed = await _rest(pizza, "get", "/api/v1/orders/?state=active")
    assert [o["id"] for o in listed.json()["results"]] == [world.order.pk]
    assert (await _rest(pizza, "get", f"/api/v1/orders/{curry_order.pk}/")).status_code == 404
    assert (
        await _rest(pizza, "post", f"/api/v1/orders/{curry_order.pk}/advance/")
    ).status_code == 404
    other = f"/api/v1/operations/restaurant-dashboard/?restaurant={world.second.pk}"
    assert (await _rest(pizza, "get", other)).status_code == 403
    own = await _rest(pizza, "get", "/api/v1/operations/restaurant-dashboard/")
    assert own.status_code == 200

"""The kitchen board's socket and the operators' feed: scoped like REST, for their whole life.

A restaurant's staff follow ``/ws/restaurants/<id>/`` for their own restaurant only
(another's looks absent, 4404, as in REST); operators may follow any. Removing a
member from the staff closes their board socket within a second. Real parts: the
broker, the local Pinot server and the embedded push bridge.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from config.asgi import application
from contract.events import now_ms
from tests.factories import make_customer, make_restaurant, place
from tests.fixtures_pinot import order_event_of
from tracker.live import messages

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

WITHIN = 1.5


@database_sync_to_async
def _world():
    alice = make_customer("alice")
    pizza, curry = make_restaurant("Pizza Place"), make_restaurant("Curry House")
    users = get_user_model().objects
    pizza_cook = users.create_user("pizza-cook", password="pw")
    curry_cook = users.create_user("curry-cook", password="pw")
    operator = users.create_user("ops", password="pw", is_staff=True)
    pizza.staff.add(pizza_cook)
    curry.staff.add(curry_cook)
    return {
        "pizza": pizza,
        "curry": curry,
        "pizza_order": place(alice, pizza),
        "curry_order": place(alice, curry),
        "pizza_cook": pizza_cook,
        "tokens": {
            name: Token.objects.create(user=u).key
            for name, u in [
                ("pizza", pizza_cook),
                ("curry", curry_cook),
                ("ops", operator),
                ("alice", alice.user),
            ]
        },  # fmt: skip
    }


async def _connect(path: str, token: str) -> tuple[WebsocketCommunicator, dict]:
    socket = WebsocketCommunicator(
        application, path, headers=[(b"authorization", f"Token {token}".encode())]
    )
    connected, _ = await socket.connect(timeout=20)
    assert connected
    return socket, await socket.receive_json_from(timeout=20)


async def test_staff_follow_their_own_restaurants_orders_and_never_anothers(pinot, asgi_lifespan):
    world = await _world()
    t0 = now_ms() - 60_000
    await pinot.apublish(
        order_event_of(world["pizza_order"], 1, created_at=t0),
        order_event_of(world["curry_order"], 1, created_at=t0),
    )
    pizza_path = f"/ws/restaurants/{world['pizza'].pk}/"
    board, snapshot = await _connect(pizza_path, world["tokens"]["pizza"])
    assert snapshot["type"] == "snapshot" and snapshot["restaurant_id"] == world["pizza"].pk
    assert [o["id"] for o in snapshot["orders"]] == [world["pizza_order"].pk]

    for who in ("curry", "alice"):  # another restaurant's staff; a customer
        refused, error = await _connect(pizza_path, world["tokens"][who])
        assert error["type"] == "error" and error["code"] == messages.CLOSE_NOT_FOUND
        await refused.disconnect()
    ops_board, ops_snapshot = await _connect(pizza_path, world["tokens"]["ops"])
    assert [o["id"] for o in ops_snapshot["orders"]] == [world["pizza_order"].pk]
    missing, error = await _connect("/ws/restaurants/999999/", world["tokens"]["ops"])
    assert error["code"] == messages.CLOSE_NOT_FOUND

    # A change to the other restaurant's order never reaches this board; its own does.
    await pinot.apublish(
        order_event_of(world["curry_order"], 2, "ORDER_CONFIRMED", created_at=t0),
        order_event_of(world["pizza_order"], 2, "ORDER_CONFIRMED", created_at=t0),
    )
    update = await board.receive_json_from(timeout=10)
    assert (update["order_id"], update["status"], update["restaurant_id"]) == (
        world["pizza_order"].pk,
        "ORDER_CONFIRMED",
        world["pizza"].pk,
    )
    assert await board.receive_nothing(timeout=1)
    assert (await ops_board.receive_json_from(timeout=10))["order_id"] == world["pizza_order"].pk
    for socket in (board, ops_board, missing):
        await socket.disconnect()


async def test_leaving_the_staff_closes_the_board_socket_within_a_second(pinot, asgi_lifespan):
    world = await _world()
    await pinot.apublish(order_event_of(world["pizza_order"], 1))
    board, _ = await _connect(f"/ws/restaurants/{world['pizza'].pk}/", world["tokens"]["pizza"])

    @database_sync_to_async
    def leave():
        world["pizza"].staff.remove(world["pizza_cook"])

    await leave()
    error = await board.receive_json_from(timeout=WITHIN)
    assert error == {
        "type": "error",
        "code": messages.CLOSE_NOT_FOUND,
        "message": "No such restaurant.",
    }
    assert await board.receive_output(timeout=WITHIN) == {
        "type": "websocket.close",
        "code": messages.CLOSE_NOT_FOUND,
    }


async def test_operations_feed_is_for_operators_and_carries_every_status_change(
    pinot, asgi_lifespan
):
    world = await _world()
    t0 = now_ms() - 60_000
    feed, snapshot = await _connect("/ws/operations/", world["tokens"]["ops"])
    assert snapshot == {"type": "snapshot"}
    refused, error = await _connect("/ws/operations/", world["tokens"]["pizza"])
    assert error["code"] == messages.CLOSE_NOT_FOUND
    await pinot.apublish(
        order_event_of(world["pizza_order"], 1, created_at=t0),
        order_event_of(world["curry_order"], 1, created_at=t0),
    )
    seen = set()
    while len(seen) < 2:  # the feed also carries the pipeline strip's samples
        message = await feed.receive_json_from(timeout=10)
        if message["type"] != "pipeline":
            seen.add(message["order_id"])
    assert seen == {world["pizza_order"].pk, world["curry_order"].pk}
    await feed.disconnect()


@database_sync_to_async
def _rest(token: str, method: str, path: str, **data):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return getattr(client, method)(path, data or None, format="json")


async def test_rest_keeps_staff_to_their_own_restaurant(pinot):
    world = await _world()
    curry_order = world["curry_order"]
    pizza = world["tokens"]["pizza"]
    await pinot.apublish(order_event_of(curry_order, 1), order_event_of(world["pizza_order"], 1))
    listed = await _rest(pizza, "get", "/api/v1/orders/?state=active")
    assert [o["id"] for o in listed.json()["results"]] == [world["pizza_order"].pk]
    assert (await _rest(pizza, "get", f"/api/v1/orders/{curry_order.pk}/")).status_code == 404
    assert (
        await _rest(pizza, "post", f"/api/v1/orders/{curry_order.pk}/advance/")
    ).status_code == 404
    other = f"/api/v1/operations/restaurant-dashboard/?restaurant={world['curry'].pk}"
    assert (await _rest(pizza, "get", other)).status_code == 403
    own = await _rest(pizza, "get", "/api/v1/operations/restaurant-dashboard/")
    assert own.status_code == 200

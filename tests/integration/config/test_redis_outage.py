"""While Redis cannot be reached, what it counts or carries is refused, never let through
and never a 500: the API answers 503 with ``Retry-After`` (a sign-in too), a WebSocket
closes with 4503, and everything answers again once Redis is back.

In production Redis holds the request budgets (REST throttles, sign-in attempts, a user's
sockets and connects) and the channel layer. In the fault drill (docs/reliability.md) a
read answered 500 during a 1 s Redis outage, and a socket whose group join failed ended
in an unhandled ASGI exception. A real ``redis-server`` is stopped mid-test, with the
settings production builds from ``REDIS_URL`` (``on_redis``, tests/conftest.py).
"""

from __future__ import annotations

import logging

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from api.errors import UNAVAILABLE_RETRY_AFTER_S
from config.asgi import application
from config.stores import cache_settings, channel_layer_settings
from tests.conftest import RedisServer
from tests.factories import make_customer
from tests.sockets import closed_with
from tracker.accounts.services import issue_token
from tracker.cache import reads

UNAVAILABLE = 4503
FEED = "/ws/operations/"  # its snapshot needs no tracking store


def assert_unavailable(response, what: str = "") -> None:
    assert response.status_code == 503, (what, response.content)
    assert response["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    error = response.json()["error"]
    assert error["status"] == 503 and error["code"] == "unavailable", error
    assert "retry" in error["message"]


@pytest.mark.django_db(transaction=True)
def test_while_redis_is_down_reads_writes_and_sign_ins_are_503_with_retry_after(on_redis):
    customer = make_customer("redis-down")
    operator = get_user_model().objects.create_user("ops-redis-down", is_staff=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(customer.user).key}")
    ops = APIClient()
    ops.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(operator).key}")
    address = {"label": "Work", "line1": "80 MG Road", "lat": 12.97, "lon": 77.61}
    sign_in = {"username": "redis-down", "password": "pw-redis-down"}

    def requests() -> dict[str, object]:
        return {
            "read": api.get("/api/v1/me/"),
            "write": api.post("/api/v1/me/addresses/", address, format="json"),
            "sign-in": APIClient().post("/api/v1/auth/token/", sign_in, format="json"),
        }

    on_redis.stop()
    for name, response in requests().items():
        assert_unavailable(response, name)
    # The fault drill's 500: an operator's read of the pipeline's health.
    assert_unavailable(ops.get("/api/v1/operations/pipeline/"))
    # The browser's sign-in is refused as well (plain text outside /api/).
    page = Client().post("/accounts/login/", {"username": "redis-down", "password": "x"})
    assert page.status_code == 503 and page["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    health = Client().get("/healthz")
    assert health.status_code == 503 and health.json()["checks"]["cache"].startswith("error")
    assert reads.registered(1) == (None, None)  # the version register: unknown, ask Pinot

    on_redis.start()
    answers = requests()
    assert answers["read"].status_code == 200, answers["read"].content
    assert answers["write"].status_code == 201, answers["write"].content
    assert answers["sign-in"].status_code == 200, answers["sign-in"].content
    assert Client().get("/healthz").status_code == 200


@database_sync_to_async
def _operator_token(name: str) -> str:
    user = get_user_model().objects.create_user(name, is_staff=True)
    return issue_token(user).key


def _feed(key: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, FEED, headers=[(b"authorization", f"Token {key}".encode())]
    )


async def _opens(key: str) -> WebsocketCommunicator:
    socket = _feed(key)
    connected, _ = await socket.connect(timeout=10)
    assert connected
    assert await socket.receive_json_from(timeout=10) == {"type": "snapshot"}
    return socket


async def _opens_after_restart(server: RedisServer, key: str) -> None:
    """Once ``server`` is started again, a new socket opens as if nothing happened."""
    await database_sync_to_async(server.start)()
    again = await _opens(key)
    await again.disconnect()


class Warnings(logging.Handler):
    """The warnings and errors one logger writes."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.logger = logging.getLogger(name)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> Warnings:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.logger.removeHandler(self)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_while_redis_is_down_a_socket_is_refused_with_4503_then_opens_again(
    on_redis, no_push_bridge
):
    key = await _operator_token("ops-ws-redis-down")
    layer = get_channel_layer()
    try:
        opened = await _opens(key)  # the pools now hold connections to the server that goes
        await opened.disconnect()
        await database_sync_to_async(on_redis.stop)()

        with Warnings("tracker.live.consumers") as logged:
            refused = _feed(key)
            connected, _ = await refused.connect(timeout=10)
            assert connected  # opened, told why, closed: never a bare HTTP error
            await closed_with(refused, UNAVAILABLE, within=10, after_others=True)
        assert [(r.levelname, r.exc_info) for r in logged.records] == [("WARNING", None)]
        assert "4503" in logged.records[0].getMessage()

        await _opens_after_restart(on_redis, key)
    finally:
        await layer.close_pools()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_socket_whose_group_join_fails_is_refused_with_4503(settings, no_push_bridge):
    """The cache answers (the connect is counted) but the channel layer's Redis does not:
    the join itself fails."""
    counters, layer_redis = RedisServer(), RedisServer()
    counters.start()
    layer_redis.start()
    try:
        settings.CACHES = cache_settings(counters.url)
        settings.CHANNEL_LAYERS = channel_layer_settings(layer_redis.url)
        key = await _operator_token("ops-ws-join-fails")
        await database_sync_to_async(layer_redis.stop)()

        refused = _feed(key)
        connected, _ = await refused.connect(timeout=10)
        assert connected
        await closed_with(refused, UNAVAILABLE, within=10, after_others=True)

        await _opens_after_restart(layer_redis, key)
    finally:
        await get_channel_layer().close_pools()
        counters.stop()
        layer_redis.stop()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_open_sockets_close_with_4503_when_redis_goes_away(on_redis, no_push_bridge):
    """A socket the channel layer no longer feeds must not pass for live: it closes, and
    its client reconnects (with ``?since=`` on an order's socket) once Redis is back."""
    key = await _operator_token("ops-ws-open")
    layer = get_channel_layer()
    try:
        sockets = [await _opens(key) for _ in range(3)]
        await database_sync_to_async(on_redis.stop)()
        for socket in sockets:
            await closed_with(socket, UNAVAILABLE, within=10, after_others=True)

        await _opens_after_restart(on_redis, key)
    finally:
        await layer.close_pools()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_quick_redis_restart_closes_every_open_socket(on_redis, no_push_bridge):
    """The sockets of a process wait on the layer in turn (channels_redis reads for all of
    them through one wait). Those whose turn comes after a quick restart read from the new
    server, where their group memberships are gone: they must close too, not stay open
    with nothing to receive."""
    key = await _operator_token("ops-ws-restart")
    layer = get_channel_layer()
    try:
        sockets = [await _opens(key) for _ in range(3)]
        on_redis.restart()  # on the event loop's thread: no socket reads until it is back
        for socket in sockets:
            await closed_with(socket, UNAVAILABLE, within=10, after_others=True)
    finally:
        await layer.close_pools()

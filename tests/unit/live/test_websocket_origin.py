"""A browser's WebSocket must come from one of our origins: scheme, host and port
(issue 53, L3).

The session cookie is ambient authority: a page on ``https://127.0.0.1:9999`` (another
program on the same host) must not open a socket with it. Trusted origins are
``CSRF_TRUSTED_ORIGINS`` and the socket's own origin (its scheme and ``Host``, when that
host is allowed).
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from config.asgi import application

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _our_origins(settings, no_push_bridge):
    settings.CSRF_TRUSTED_ORIGINS = ["http://127.0.0.1:8000", "https://*.shop.example"]
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver", "shop.example"]


@database_sync_to_async
def _operator_session() -> str:
    browser = Client()
    browser.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return browser.cookies["sessionid"].value


async def _connect(session: str, origin: str, host: str = "127.0.0.1:8000", scheme="ws"):
    headers = [(b"cookie", f"sessionid={session}".encode()), (b"host", host.encode())]
    headers.append((b"origin", origin.encode()))
    socket = WebsocketCommunicator(application, "/ws/operations/", headers=headers)
    socket.scope["scheme"] = scheme
    connected, code = await socket.connect(timeout=10)
    if connected:
        assert (await socket.receive_json_from(timeout=10))["type"] == "snapshot"
        await socket.disconnect()
    return connected, code


@pytest.mark.parametrize(
    "origin",
    [
        "https://127.0.0.1:9999",  # the issue's: right host, another port and scheme
        "http://127.0.0.1:9999",  # another port
        "https://127.0.0.1:8000",  # another scheme
        "http://127.0.0.1",  # port 80, not 8000
        "http://evil.example:8000",
        "null",
    ],
)
async def test_a_session_socket_from_another_origin_is_refused(origin):
    assert await _connect(await _operator_session(), origin) == (False, 4403)


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws"),  # a trusted origin
        ("https://app.shop.example", "app.shop.example", "wss"),  # a trusted wildcard
        ("https://shop.example", "shop.example", "wss"),  # the socket's own origin
        ("http://localhost:8000", "localhost:8000", "ws"),  # its own origin, host allowed
    ],
)
async def test_a_session_socket_from_our_origin_opens(origin, host, scheme):
    connected, _ = await _connect(await _operator_session(), origin, host, scheme)
    assert connected

"""What a client may send a WebSocket (issue 53, M1): message size, sockets per user,
connect and ping rates.

The sockets are the real ASGI application's with the in-memory channel layer; the
operators' feed is used because its snapshot needs no tracking store, so every socket a
test opens stays open until the test closes it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.cache import cache

from config.asgi import application
from tests.sockets import closed_with
from tracker.accounts.services import issue_token

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
FEED = "/ws/operations/"
TOO_MANY = 4429
MESSAGE_TOO_BIG = 1009


@pytest.fixture(autouse=True)
def _quick_heartbeat(settings, no_push_bridge):
    settings.PUSH_HEARTBEAT_SECONDS = 0.2
    cache.clear()
    yield
    cache.clear()


@database_sync_to_async
def _operator_token(name: str = "ops") -> str:
    user = get_user_model().objects.create_user(name, is_staff=True)
    return issue_token(user).key


def _auth(key: str) -> list:
    return [(b"authorization", f"Token {key}".encode())]


async def _open(key: str) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, FEED, headers=_auth(key))
    connected, _ = await socket.connect(timeout=10)
    assert connected
    first = await socket.receive_json_from(timeout=10)
    assert first == {"type": "snapshot"}, first
    return socket


async def _pong(socket: WebsocketCommunicator) -> dict:
    await socket.send_json_to({"type": "ping"})
    deadline = time.monotonic() + 5
    while True:
        assert time.monotonic() < deadline, "no pong within 5 s"
        message = await socket.receive_json_from(timeout=5)
        if message["type"] != "heartbeat" and message["type"] != "pipeline":
            return message


@pytest.mark.asyncio
async def test_a_frame_larger_than_any_client_message_is_refused_before_parsing():
    key = await _operator_token()
    flooded, bystander = await _open(key), await _open(key)
    flood = json.dumps([{"a": 1}] * 1_600_000)  # 15.3 MiB, under uvicorn's default limit
    await flooded.send_to(text_data=flood)
    await closed_with(flooded, MESSAGE_TOO_BIG, after_others=True)
    assert (await _pong(bystander))["type"] == "pong"  # the other socket is served
    # Just over the limit is refused too; a ping at the limit is answered.
    limit = django_settings.WS_MAX_MESSAGE_BYTES
    over = await _open(key)
    await over.send_to(text_data=json.dumps({"type": "ping", "pad": "x" * limit}))
    await closed_with(over, MESSAGE_TOO_BIG, after_others=True)
    await bystander.disconnect()


def _uvicorn_commands() -> dict[str, str]:
    """Every uvicorn command line that serves the app: the image, compose, make run."""
    from localrun.components import components

    compose = (ROOT / "docker-compose.yml").read_text()
    web = compose.split("\n  web:\n", 1)[1].split("\n  proxy:\n", 1)[0]
    dockerfile = (ROOT / "Dockerfile").read_text()
    embedded = next(c for c in components() if c.name == "web")
    return {
        "Dockerfile CMD": next(line for line in dockerfile.splitlines() if line.startswith("CMD")),
        "docker-compose.yml web": web,
        "make run (localrun/components.py)": " ".join(embedded.argv),
    }


def test_every_server_command_refuses_frames_over_the_message_limit():
    limit = django_settings.WS_MAX_MESSAGE_BYTES
    for where, command in _uvicorn_commands().items():
        found = re.search(r'--ws-max-size[=", ]+(\d+)', command)
        assert found, f"{where}: no --ws-max-size (uvicorn's default is 16 MiB)"
        assert int(found.group(1)) == limit, where


@pytest.mark.asyncio
async def test_each_user_may_hold_a_limited_number_of_sockets(settings):
    settings.WS_MAX_SOCKETS_PER_USER = 3
    mine, theirs = await _operator_token("ops1"), await _operator_token("ops2")
    held = [await _open(mine) for _ in range(3)]
    extra = WebsocketCommunicator(application, FEED, headers=_auth(mine))
    assert (await extra.connect(timeout=10))[0]
    refusal = await closed_with(extra, TOO_MANY, after_others=True)
    assert "3 sockets" in refusal["message"]
    other = await _open(theirs)  # another user's budget is their own
    await held.pop().disconnect()  # a closed socket frees its place
    held.append(await _open(mine))
    for socket in [*held, other]:
        await socket.disconnect()


@pytest.mark.asyncio
async def test_connects_are_rate_limited_per_user(settings):
    settings.WS_CONNECT_RATE = "4/min"
    key = await _operator_token()
    for _ in range(4):
        await (await _open(key)).disconnect()
    refused = WebsocketCommunicator(application, FEED, headers=_auth(key))
    assert (await refused.connect(timeout=10))[0]
    refusal = await closed_with(refused, TOO_MANY, after_others=True)
    assert refusal["retry_after"] > 0


@pytest.mark.asyncio
async def test_pings_are_rate_limited_per_socket(settings):
    settings.WS_PING_RATE = "3/min"
    socket = await _open(await _operator_token())
    for _ in range(3):
        assert (await _pong(socket))["type"] == "pong"
    await socket.send_json_to({"type": "ping"})
    refusal = await closed_with(socket, TOO_MANY, after_others=True)
    assert refusal["retry_after"] > 0

"""An open WebSocket signed in before a password change closes (issue 69, N1).

The socket re-checks its credential (``tracker.live.auth.current_user``) when its user
is saved (the signal path; the periodic re-check is a day away in those tests, so the
signal is what closes the socket) and every ``PUSH_RECHECK_SECONDS`` (a change that sends
no signal). How soon is bench/'s to measure, not a test's. The operators' socket needs no Pinot, so this runs without engines,
on the real ASGI application with the in-memory channel layer.
"""

from __future__ import annotations

import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.test import Client

from config.asgi import application
from tests.sockets import closed_with
from tracker.accounts.services import issue_token
from tracker.live import messages

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_periodic_recheck", "no_push_bridge"),
]


@database_sync_to_async
def _operators() -> dict:
    users = get_user_model().objects
    ops = {name: users.create_user(name, password=f"pw-{name}", is_staff=True)
           for name in ("ops", "ops2")}  # fmt: skip
    return {name: (user, issue_token(user).key) for name, user in ops.items()}


def _token(key: str) -> list:
    return [(b"authorization", f"Token {key}".encode())]


async def _open(headers: list) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, "/ws/operations/", headers=headers)
    connected, _ = await socket.connect(timeout=10)
    assert connected
    assert (await socket.receive_json_from(timeout=10))["type"] == "snapshot"
    return socket


async def _still_open(socket: WebsocketCommunicator, within: float = 5.0) -> None:
    """The socket answers a ping (pipeline samples and heartbeats may come first)."""
    await socket.send_json_to({"type": "ping"})
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        message = await socket.receive_json_from(timeout=left)
        assert message["type"] != "error", message
        if message["type"] == "pong":
            return
    raise AssertionError(f"no pong within {within} s")


def _set_password(user) -> None:
    user.set_password("Reset-by-operators-69")
    user.save()


async def test_a_password_change_closes_the_token_socket_but_not_other_users():
    ops = await _operators()
    (mine, my_key), (_, their_key) = ops["ops"], ops["ops2"]
    phished, theirs = await _open(_token(my_key)), await _open(_token(their_key))
    await database_sync_to_async(_set_password)(mine)
    await closed_with(phished, messages.CLOSE_UNAUTHENTICATED, after_others=True)
    await _still_open(theirs)
    await (await _open(_token(their_key))).disconnect()  # and a new one still opens
    await theirs.disconnect()
    # A reconnect with the old token is refused like any other connect.
    again = WebsocketCommunicator(application, "/ws/operations/", headers=_token(my_key))
    assert (await again.connect(timeout=10))[0]
    assert (await again.receive_json_from(timeout=10))["code"] == messages.CLOSE_UNAUTHENTICATED


async def test_a_password_change_closes_the_session_socket():
    ops = await _operators()
    browser = Client()
    await database_sync_to_async(browser.force_login)(ops["ops"][0])
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()
    socket = await _open([(b"cookie", cookie), (b"origin", b"http://127.0.0.1:8000")])
    await database_sync_to_async(_set_password)(ops["ops"][0])
    await closed_with(socket, messages.CLOSE_UNAUTHENTICATED, after_others=True)


async def test_a_password_changed_without_a_signal_closes_at_the_periodic_recheck(settings):
    """A bulk ``update`` sends no signal: the periodic re-check is the bound."""
    settings.PUSH_RECHECK_SECONDS = 0.3
    ops = await _operators()
    user, key = ops["ops"]
    socket = await _open(_token(key))
    await database_sync_to_async(
        lambda: (
            get_user_model()
            .objects.filter(pk=user.pk)
            .update(password=make_password("Reset-by-operators-69"))
        )
    )()
    await closed_with(socket, messages.CLOSE_UNAUTHENTICATED, after_others=True)

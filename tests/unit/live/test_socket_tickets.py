"""A socket ticket (issue 69, N5) opens one socket for the credential it was issued under,
and that socket lives only as long as the credential: signing the token out, or changing
the password, closes it (4401) as it closes a socket signed in with the key itself. A key
in the query string (``?token=``) signs nothing in. Runs on the real ASGI application with
the in-memory channel layer (the operators' socket needs no Pinot)."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from config.asgi import application
from tests.sockets import closed_with
from tracker.live import messages

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_periodic_recheck", "no_push_bridge"),
]


@database_sync_to_async
def _operator_key() -> tuple:
    user = get_user_model().objects.create_user("ops", password="pw-ops", is_staff=True)
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": "ops", "password": "pw-ops"}, format="json"
    )
    return user, response.json()["token"]


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@database_sync_to_async
def _ticket(client) -> str:
    response = client.post("/api/v1/auth/socket-ticket/")
    assert response.status_code == 201, response.content
    return response.json()["ticket"]


async def _open(query: str, headers: list | None = None) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, f"/ws/operations/?{query}", headers=headers)
    assert (await socket.connect(timeout=10))[0]
    return socket


async def _first(socket: WebsocketCommunicator) -> dict:
    return await socket.receive_json_from(timeout=10)


async def test_signing_the_token_out_closes_the_socket_its_ticket_opened():
    _, key = await _operator_key()
    socket = await _open(f"ticket={await _ticket(_api(key))}")
    assert (await _first(socket))["type"] == "snapshot"
    assert (await database_sync_to_async(_api(key).post)("/api/v1/auth/logout/")).status_code == 204
    await closed_with(socket, messages.CLOSE_UNAUTHENTICATED, after_others=True)


async def test_a_password_change_closes_the_socket_a_ticket_opened():
    user, key = await _operator_key()
    socket = await _open(f"ticket={await _ticket(_api(key))}")
    assert (await _first(socket))["type"] == "snapshot"

    def reset() -> None:
        user.set_password("Reset-by-operators-69")
        user.save()

    await database_sync_to_async(reset)()
    await closed_with(socket, messages.CLOSE_UNAUTHENTICATED, after_others=True)


async def test_a_ticket_issued_for_a_revoked_token_opens_nothing():
    _, key = await _operator_key()
    ticket = await _ticket(_api(key))
    await database_sync_to_async(_api(key).post)("/api/v1/auth/logout/")
    socket = await _open(f"ticket={ticket}")
    assert (await _first(socket))["code"] == messages.CLOSE_UNAUTHENTICATED


async def test_a_lapsed_ticket_opens_nothing(settings):
    settings.SOCKET_TICKET_SECONDS = 0  # the cache keeps it no time at all
    _, key = await _operator_key()
    socket = await _open(f"ticket={await _ticket(_api(key))}")
    assert (await _first(socket))["code"] == messages.CLOSE_UNAUTHENTICATED


async def test_a_key_in_the_query_string_signs_nothing_in():
    _, key = await _operator_key()
    socket = await _open(f"token={key}")
    assert (await _first(socket))["code"] == messages.CLOSE_UNAUTHENTICATED


async def test_a_browser_session_gets_a_ticket_standing_for_the_session():
    user, _ = await _operator_key()
    browser = Client()
    await database_sync_to_async(browser.force_login)(user)
    socket = await _open(f"ticket={await _ticket(browser)}")  # no cookie on the socket
    assert (await _first(socket))["type"] == "snapshot"
    await database_sync_to_async(browser.post)("/accounts/logout/")
    await closed_with(socket, messages.CLOSE_UNAUTHENTICATED, after_others=True)

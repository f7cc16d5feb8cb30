"""API tokens are kept only as digests, and browsers open sockets with a ticket (issue 69, N5).

A copy of the database (a backup, a replica, a screen of the admin) must open no account:
the key a sign-in answers is stored nowhere, and the admin never shows one. A browser
cannot set a header on a WebSocket, so instead of putting the long-lived key in the URL
(``?token=``, which proxies log) it asks for a short-lived ticket that signs one socket in.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.apps import apps
from django.contrib import admin
from django.db import models
from django.test import Client
from rest_framework.test import APIClient

from config.asgi import application
from tests.factories import make_customer
from tracker.live import messages


def _sign_in(username: str, password: str) -> str:
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": username, "password": password}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()["token"]


def _rows_holding(value: str) -> list[str]:
    """Every model field, of every installed model, that holds ``value`` in some row."""
    found = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            text = isinstance(field, models.CharField | models.TextField)
            if text and model._default_manager.filter(**{field.attname: value}).exists():
                found.append(f"{model._meta.label}.{field.name}")
    return found


@pytest.mark.django_db
def test_a_signed_in_key_is_stored_nowhere_in_the_database():
    make_customer("alice")
    key = _sign_in("alice", "pw-alice")
    assert _rows_holding(key) == []


@pytest.mark.django_db
def test_the_admin_never_shows_a_key():
    from django.contrib.auth import get_user_model

    make_customer("alice")
    key = _sign_in("alice", "pw-alice")
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("root", password="x" * 12))
    for model in admin.site._registry:
        meta = model._meta
        page = operator.get(f"/admin/{meta.app_label}/{meta.model_name}/")
        assert page.status_code == 200, (meta.label, page.status_code)
        assert key not in page.content.decode(), meta.label


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_socket_ticket_signs_one_socket_in_once(no_push_bridge):
    from django.contrib.auth import get_user_model

    await database_sync_to_async(get_user_model().objects.create_user)(
        "ops", password="pw-ops", is_staff=True
    )
    key = await database_sync_to_async(_sign_in)("ops", "pw-ops")

    def ticket() -> str:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        response = client.post("/api/v1/auth/socket-ticket/")
        assert response.status_code == 201, response.content
        return response.json()["ticket"]

    once = await database_sync_to_async(ticket)()
    socket = WebsocketCommunicator(application, f"/ws/operations/?ticket={once}")
    assert (await socket.connect(timeout=10))[0]
    assert (await socket.receive_json_from(timeout=10))["type"] == "snapshot"
    await socket.disconnect()
    again = WebsocketCommunicator(application, f"/ws/operations/?ticket={once}")
    assert (await again.connect(timeout=10))[0]
    assert (await again.receive_json_from(timeout=10))["code"] == messages.CLOSE_UNAUTHENTICATED

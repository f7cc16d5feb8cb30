"""While the database cannot be reached, the API answers 503 with ``Retry-After``, never a
500 (issue 54: PostgreSQL stopped in the fault drill), and answers again once it can."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from api.errors import UNAVAILABLE_RETRY_AFTER_S
from tracker.accounts.services import issue_token


@pytest.mark.django_db(transaction=True)
def test_while_the_database_cannot_be_reached_every_request_is_a_503_with_retry_after(
    django_user_model, database_outage
):
    user = django_user_model.objects.create_user("db-down", password="pw-db-down")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(user).key}")
    database_outage.start()
    answers = [
        client.get("/api/v1/orders/"),
        client.get("/api/v1/orders/1/"),
        client.post("/api/v1/orders/", {"restaurant_id": 1, "items": []}, format="json"),
        client.post("/api/v1/orders/1/cancel/", {}, format="json"),
    ]
    database_outage.end()
    for response in answers:
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
        error = response.json()["error"]
        assert error["code"] == "unavailable" and "retry" in error["message"]
    assert client.get("/api/v1/me/").status_code == 200  # back as soon as it can be reached


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_while_the_database_cannot_be_reached_a_socket_is_refused_with_4503(
    django_user_model, database_outage
):
    """The socket's sign-in cannot be checked: opened, told why, closed with 4503 (the
    client retries with back-off), never a bare HTTP 500 on the handshake."""
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator

    from config.asgi import application

    @database_sync_to_async
    def token_and_lose_the_database() -> str:
        user = django_user_model.objects.create_user("ws-db-down", password="pw-ws-db-down")
        key = issue_token(user).key
        database_outage.start()  # in the thread the socket's sign-in check reads from
        return key

    key = await token_and_lose_the_database()
    socket = WebsocketCommunicator(
        application, "/ws/orders/", headers=[(b"authorization", f"Token {key}".encode())]
    )
    connected, _ = await socket.connect(timeout=10)
    assert connected
    error = await socket.receive_json_from(timeout=10)
    assert error["type"] == "error" and error["code"] == 4503
    assert (await socket.receive_output(timeout=10)) == {"type": "websocket.close", "code": 4503}
    await database_sync_to_async(database_outage.end)()

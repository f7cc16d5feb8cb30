"""While the database cannot be reached, the API answers 503 with ``Retry-After``, never a
500 (issue 54: PostgreSQL stopped in the fault drill), and answers again once it can."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from api.errors import UNAVAILABLE_RETRY_AFTER_S
from embedded.kafka import free_port


@pytest.mark.django_db(transaction=True)
def test_while_the_database_cannot_be_reached_every_request_is_a_503_with_retry_after(
    django_user_model,
):
    if connection.vendor != "postgresql":
        pytest.skip("needs a database server to lose: run on PostgreSQL (make test's second run)")
    user = django_user_model.objects.create_user("db-down", password="pw-db-down")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    saved = dict(connection.settings_dict)
    connection.close()
    # A real connection attempt that fails: nothing listens on this port.
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    try:
        answers = [
            client.get("/api/v1/orders/"),
            client.get("/api/v1/orders/1/"),
            client.post("/api/v1/orders/", {"restaurant_id": 1, "items": []}, format="json"),
            client.post("/api/v1/orders/1/cancel/", {}, format="json"),
        ]
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    for response in answers:
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
        error = response.json()["error"]
        assert error["code"] == "unavailable" and "retry" in error["message"]
    assert client.get("/api/v1/me/").status_code == 200  # back as soon as it can be reached

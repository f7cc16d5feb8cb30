"""One token per sign-in (issue 69, N5): signing out revokes this app's token only;
signing out everywhere revokes every token of the user; a user's tokens are bounded."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import make_customer
from tracker.accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def _sign_in(username: str, client: str = "") -> str:
    body = {"username": username, "password": f"pw-{username}"}
    body |= {"client": client} if client else {}
    response = APIClient().post("/api/v1/auth/token/", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()["token"]


def _as(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _me(key: str) -> int:
    return _as(key).get("/api/v1/me/").status_code


def test_signing_out_revokes_this_token_only():
    make_customer("alice")
    phone, tablet = _sign_in("alice", "phone"), _sign_in("alice", "tablet")
    assert _as(phone).post("/api/v1/auth/logout/").status_code == 204
    assert (_me(phone), _me(tablet)) == (401, 200)
    assert list(ApiToken.objects.values_list("client", flat=True)) == ["tablet"]


def test_signing_out_everywhere_revokes_every_token_of_the_user_only():
    make_customer("alice"), make_customer("bob")
    phone, tablet, bobs = _sign_in("alice"), _sign_in("alice"), _sign_in("bob")
    response = _as(phone).post("/api/v1/auth/logout-everywhere/")
    assert response.status_code == 200 and response.json() == {"tokens_revoked": 2}
    assert (_me(phone), _me(tablet), _me(bobs)) == (401, 401, 200)


def test_a_sign_in_past_the_cap_revokes_the_oldest_token(settings):
    settings.API_TOKENS_PER_USER = 2
    make_customer("alice")
    first, second, third = _sign_in("alice"), _sign_in("alice"), _sign_in("alice")
    assert (_me(first), _me(second), _me(third)) == (401, 200, 200)

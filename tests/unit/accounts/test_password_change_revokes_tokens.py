"""A password change revokes the API token it was issued under (issue 69, N1).

Someone who phished a courier's password and signed in keeps a token; when operators
reset the password, that token must stop working for REST, and the courier's next
sign-in must get a new token. Every way a password changes counts, including one that
sends no signal (a bulk ``update``): the check is at the token's lookup.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.hashers import make_password
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import make_courier, make_customer
from tracker.accounts.models import ApiToken
from tracker.accounts.security import user_for_token
from tracker.accounts.services import issue_token
from tracker.sharing.tokens import digest

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "Reset-by-operators-69"


def _sign_in(username: str, password: str) -> str:
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": username, "password": password}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()["token"]


def _me(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/me/").status_code


def _set_and_save(user) -> None:
    user.set_password(NEW_PASSWORD)
    user.save()


def _reset_form(user) -> None:
    """What the password-reset confirmation page and ``changepassword`` end in."""
    form = SetPasswordForm(user, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert form.is_valid(), form.errors
    form.save()


def _bulk_update(user) -> None:
    """No model save, no signal: only a check at lookup catches this one."""
    get_user_model().objects.filter(pk=user.pk).update(password=make_password(NEW_PASSWORD))


@pytest.mark.parametrize("change", [_reset_form, _bulk_update])
def test_a_token_stops_working_once_the_password_changes_any_other_way(change: Callable) -> None:
    courier = make_courier("rider")
    phished = _sign_in("rider", "pw-rider")
    assert _me(phished) == 200
    change(courier.user)
    assert _me(phished) == 401


def test_a_token_stops_working_once_the_password_is_set_and_saved():
    courier = make_courier("rider")
    phished = _sign_in("rider", "pw-rider")
    assert _me(phished) == 200
    courier.user.set_password("reset-by-operators")
    courier.user.save()
    assert _me(phished) == 401


def test_an_admin_password_reset_revokes_the_token():
    courier = make_courier("rider")
    phished = _sign_in("rider", "pw-rider")
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("root", password="x" * 12))
    response = operator.post(
        f"/admin/auth/user/{courier.user.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 302, response.content  # the form was accepted
    assert _me(phished) == 401


def test_the_sign_in_after_a_reset_gets_a_new_token_that_works():
    courier = make_courier("rider")
    phished = _sign_in("rider", "pw-rider")
    own = _sign_in("rider", "pw-rider")  # each sign-in its own token (N5)
    assert own != phished and _me(own) == _me(phished) == 200
    _set_and_save(courier.user)
    fresh = _sign_in("rider", NEW_PASSWORD)
    assert fresh not in (phished, own)
    assert _me(fresh) == 200
    assert _me(phished) == _me(own) == 401
    alive = [user_for_token(key) for key in (phished, own, fresh)]
    assert alive == [None, None, courier.user]


def test_other_users_tokens_keep_working_after_a_reset():
    courier, other = make_courier("rider"), make_courier("rider2")
    customer = make_customer("alice")
    keys = {
        "rider": _sign_in("rider", "pw-rider"),
        "rider2": _sign_in("rider2", "pw-rider2"),
        "alice": issue_token(customer.user).key,
    }
    _set_and_save(courier.user)
    assert {name: _me(key) for name, key in keys.items()} == {
        "rider": 401,
        "rider2": 200,
        "alice": 200,
    }
    assert other.user.check_password("pw-rider2")


def test_saving_the_user_without_a_new_password_keeps_the_token():
    courier = make_courier("rider")
    key = _sign_in("rider", "pw-rider")
    courier.user.first_name = "Ravi"
    courier.user.save()
    assert _me(key) == 200


def test_a_token_made_past_the_seal_never_works():
    """A token row whose key was not sealed for its user (made by hand, not by signing in)
    fails closed, and the next sign-in gets a token that works."""
    customer = make_customer("alice")
    unsealed = secrets.token_hex(20)
    ApiToken.objects.create(user=customer.user, digest=digest(unsealed))
    assert _me(unsealed) == 401
    fresh = _sign_in("alice", "pw-alice")
    assert fresh != unsealed and _me(fresh) == 200

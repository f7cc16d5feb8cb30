"""One client cannot lock an account out of sign-in (issue 53, L5).

Every attempt counts against its client's budget (``API_THROTTLE_LOGIN``) and its user
name's (``API_THROTTLE_LOGIN_USERNAME``), which is larger than one client's, so one
address spending all of its own attempts on ``operator`` leaves the name's owner able to
sign in from elsewhere, while a guess spread over many addresses is still capped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "/api/v1/auth/token/"


def _sign_in(address: str, password: str) -> int:
    body = {"username": "operator", "password": password}
    return (
        Client(REMOTE_ADDR=address).post(TOKEN, body, content_type="application/json").status_code
    )


def test_one_client_cannot_lock_an_account_out_of_sign_in():
    get_user_model().objects.create_user("operator", password="the-right-one-53")
    attacker = [_sign_in("198.51.100.7", "bad") for _ in range(12)]
    assert attacker == [401] * 10 + [429, 429]  # the guessing client is throttled
    assert _sign_in("203.0.113.5", "the-right-one-53") == 200  # the owner is not


def test_a_guess_spread_over_many_clients_is_still_capped_per_name():
    get_user_model().objects.create_user("operator", password="the-right-one-53")
    codes = [_sign_in(f"192.0.2.{i}", "bad") for i in range(31)]
    assert codes == [401] * 30 + [429]  # API_THROTTLE_LOGIN_USERNAME: 30/min
    assert _sign_in("203.0.113.5", "the-right-one-53") == 429  # every attempt counted


def test_a_name_budget_one_client_could_spend_is_refused_at_start():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "API_"))}
    env = {**base, "DJANGO_DEBUG": "true", "API_THROTTLE_LOGIN": "10/min",
           "API_THROTTLE_LOGIN_USERNAME": "10/min"}  # fmt: skip
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup()"
    )
    started = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert started.returncode != 0 and "API_THROTTLE_LOGIN_USERNAME" in started.stderr


def test_three_addresses_spending_a_names_budget_do_not_lock_out_its_owners_device():
    """The name's budget caps a guess spread over many addresses, but three of them (or,
    before the /64 keying, one /64) spend it all. A browser or app that signed in to the
    account before holds a signed device cookie for that name: its attempts count against
    its own budget, not the shared one, so the owner signs in from it."""
    get_user_model().objects.create_user("operator", password="the-right-one-53")
    phone = Client(REMOTE_ADDR="203.0.113.5")
    body = {"username": "operator", "password": "the-right-one-53"}
    assert phone.post(TOKEN, body, content_type="application/json").status_code == 200
    spent = [_sign_in(f"198.51.{n}.7", "bad") for n in range(3) for _ in range(10)]
    assert spent == [401] * 29 + [429]  # the name's 30 (the owner's sign-in counted too)
    assert _sign_in("192.0.2.1", "the-right-one-53") == 429  # an unknown client is capped
    assert phone.post(TOKEN, body, content_type="application/json").status_code == 200
    # The cookie is the name's: signed, and for this user name only.
    get_user_model().objects.create_user("mallory", password="mallory-own-one-69")
    other = Client(REMOTE_ADDR="192.0.2.2")
    mine = {"username": "mallory", "password": "mallory-own-one-69"}
    assert other.post(TOKEN, mine, content_type="application/json").status_code == 200
    assert other.post(TOKEN, body, content_type="application/json").status_code == 429
    forged = Client(REMOTE_ADDR="192.0.2.3")
    forged.cookies[next(iter(phone.cookies))] = "operator:forged"
    assert forged.post(TOKEN, body, content_type="application/json").status_code == 429


def test_the_browser_sign_in_leaves_the_device_cookie_too():
    from tracker.accounts.security import DEVICE_COOKIE

    get_user_model().objects.create_user("operator", password="the-right-one-53")
    browser = Client(REMOTE_ADDR="203.0.113.5")
    wrong = browser.post("/accounts/login/", {"username": "operator", "password": "bad"})
    assert wrong.status_code == 200 and DEVICE_COOKIE not in wrong.cookies  # no sign-in
    signed_in = browser.post(
        "/accounts/login/", {"username": "operator", "password": "the-right-one-53"}
    )
    assert signed_in.status_code == 302
    cookie = signed_in.cookies[DEVICE_COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Lax"

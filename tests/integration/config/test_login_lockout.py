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
    env = {**base, "API_THROTTLE_LOGIN": "10/min", "API_THROTTLE_LOGIN_USERNAME": "10/min"}
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup()"
    )
    started = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert started.returncode != 0 and "API_THROTTLE_LOGIN_USERNAME" in started.stderr

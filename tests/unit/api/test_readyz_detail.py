"""``/readyz`` is public; the pipeline's detail is for operators (issue 53, L1).

Load balancers and orchestrators call it without credentials and need only its status
and code; the snapshot (events ever written, rates, broker error text) is what
``GET /api/v1/operations/pipeline/`` gives operators.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


def test_anonymous_readyz_callers_get_the_status_only():
    answer = Client().get("/readyz")
    assert answer.status_code in (200, 503)
    assert set(answer.json()) == {"status"}


def test_a_signed_in_non_operator_gets_the_status_only():
    browser = Client()
    browser.force_login(get_user_model().objects.create_user("alice"))
    assert set(browser.get("/readyz").json()) == {"status"}


def test_operators_get_the_checks_and_the_pipeline_snapshot():
    browser = Client()
    browser.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    body = browser.get("/readyz").json()
    assert {"status", "checks", "pipeline"} <= set(body)
    assert body["checks"]["database"] == "ok"


def test_operators_may_use_their_api_token():
    from tracker.accounts.services import issue_token

    ops = get_user_model().objects.create_user("ops", is_staff=True)
    key = issue_token(ops).key
    body = Client().get("/readyz", HTTP_AUTHORIZATION=f"Token {key}").json()
    assert "pipeline" in body
    assert set(Client().get("/readyz", HTTP_AUTHORIZATION="Token wrong").json()) == {"status"}

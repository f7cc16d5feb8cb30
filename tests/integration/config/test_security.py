"""Security promises: CSRF on browser writes, throttled writes, no secrets in the repository,
production security headers, WebSocket origin checks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from django.test import Client, override_settings

from tests.factories import make_customer, make_restaurant

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.django_db


def _order_body(restaurant) -> dict:
    product = restaurant.products.first()
    return {
        "restaurant_id": restaurant.pk,
        "items": [{"product_id": product.pk, "quantity": 1}],
        "delivery": {"address": "x", "lat": 12.9, "lon": 77.6},
    }


def test_browser_session_writes_need_the_csrf_token():
    customer, restaurant = make_customer("alice"), make_restaurant()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(customer.user)
    refused = browser.post(
        "/api/v1/orders/", _order_body(restaurant), content_type="application/json"
    )
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]["message"]
    from django.middleware.csrf import _get_new_csrf_string

    token = _get_new_csrf_string()
    browser.cookies["csrftoken"] = token
    accepted = browser.post(
        "/api/v1/orders/",
        _order_body(restaurant),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert accepted.status_code == 201


def test_placing_orders_is_rate_limited_per_user(monkeypatch):
    from django.core.cache import cache
    from rest_framework.test import APIClient
    from rest_framework.throttling import ScopedRateThrottle

    cache.clear()
    # DRF reads the rates once at import; API_THROTTLE_ORDERS sets them in deployment.
    monkeypatch.setattr(
        ScopedRateThrottle,
        "THROTTLE_RATES",
        {**ScopedRateThrottle.THROTTLE_RATES, "orders": "3/min"},
    )
    customer, restaurant = make_customer("alice"), make_restaurant()
    client = APIClient()
    client.force_authenticate(customer.user)
    codes = [
        client.post("/api/v1/orders/", _order_body(restaurant), format="json").status_code
        for _ in range(4)
    ]
    assert codes == [201, 201, 201, 429]
    cache.clear()


SECRET_PATTERNS = [
    re.compile(rb"-----BEGIN (RSA |EC |OPENSSH )?PRIVATE KEY-----"),
    re.compile(rb"AKIA[0-9A-Z]{16}"),
    re.compile(rb"(?i)(password|secret|token)\s*[:=]\s*['\"][A-Za-z0-9/+]{24,}['\"]"),
]


def test_no_secrets_are_committed():
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".svg", ".json"} and "results" in name:
            continue
        data = path.read_bytes()
        offenders += [f"{name}: {p.pattern!r}" for p in SECRET_PATTERNS if p.search(data)]
    assert offenders == []


def test_production_settings_send_security_headers():
    with override_settings(
        DEBUG=False,
        SECURE_HSTS_SECONDS=31536000,
        SECURE_HSTS_INCLUDE_SUBDOMAINS=True,
        SECURE_CONTENT_TYPE_NOSNIFF=True,
        X_FRAME_OPTIONS="DENY",
        SECURE_SSL_REDIRECT=False,
    ):
        response = Client().get("/api/v1/me/", secure=True)
    assert response.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Referrer-Policy"] == "same-origin"


def test_production_settings_module_turns_the_headers_on(monkeypatch):
    """The settings module itself (not an override) enables them when DEBUG is off."""
    env = {
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": "x" * 60,
        "DJANGO_ALLOWED_HOSTS": "example.com",
    }
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
        "from django.conf import settings as s;"
        "print(s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.X_FRAME_OPTIONS)"
    )
    import os
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["31536000", "True", "True", "True", "DENY"]


def test_healthz_reports_database_and_cache_without_auth():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "cache": "ok"}}

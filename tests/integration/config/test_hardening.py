"""Hardening (issue 15): safe defaults, request size, login throttles, admin edits,
future-dated GPS points and huge or deeply nested input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracker.orders.policy import SYSTEM

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.django_db


def _start_django(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings';"
        "django.setup(); print('started')"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**base, **env}, capture_output=True, text=True
    )


def test_debug_off_with_the_development_secret_key_refuses_to_start():
    refused = _start_django({"DJANGO_DEBUG": "false", "DJANGO_ALLOWED_HOSTS": "example.com"})
    assert refused.returncode != 0
    assert "started" not in refused.stdout
    assert "ImproperlyConfigured" in refused.stderr
    assert "Set DJANGO_SECRET_KEY" in refused.stderr  # says what to set
    started = _start_django(
        {"DJANGO_DEBUG": "false", "DJANGO_ALLOWED_HOSTS": "example.com",
         "DJANGO_SECRET_KEY": "k" * 60}
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    # Development asks for debug, and needs nothing else.
    assert _start_django({"DJANGO_DEBUG": "true"}).stdout.strip() == "started"
    assert _start_django({}).returncode != 0  # debug is off unless asked for


# --------------------------------------------------------------------------- request size


def test_an_oversized_json_body_is_a_413_in_the_api_error_format():
    from django.test import Client

    huge = '{"username": "' + "a" * (2 * 1024 * 1024) + '", "password": "x"}'
    response = Client().post("/api/v1/auth/token/", huge, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["status"] == 413
    assert response.json()["error"]["code"] == "too_large"
    # A normal body still works (wrong password: 401, not 413).
    ok = Client().post(
        "/api/v1/auth/token/", {"username": "a", "password": "x"}, content_type="application/json"
    )
    assert ok.status_code == 401


@pytest.mark.asyncio
@pytest.mark.parametrize("declare_length", [True, False])
async def test_the_asgi_server_stops_reading_an_endless_body_at_the_limit(declare_length):
    """Neither a huge Content-Length nor a chunked body without one is buffered by Django."""
    import asyncio

    from django.conf import settings

    from config.asgi import application

    chunk = b"x" * 65536
    read = 0

    async def receive():
        nonlocal read
        read += 1
        await asyncio.sleep(0)
        return {"type": "http.request", "body": chunk, "more_body": True}  # never ends

    sent = []

    async def send(message):
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"host", b"testserver")]
    if declare_length:
        headers.append((b"content-length", str(3 * 1024**3).encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/api/v1/auth/token/", "raw_path": b"/api/v1/auth/token/",
        "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }  # fmt: skip
    await asyncio.wait_for(application(scope, receive, send), timeout=30)
    assert sent[0]["status"] == 413
    assert read <= settings.REQUEST_MAX_BODY_BYTES // len(chunk) + 1


# --------------------------------------------------------------------------- login throttles


@pytest.fixture
def fresh_cache():
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def test_api_login_throttle_ignores_a_client_written_forwarded_for(fresh_cache):
    from django.test import Client

    client = Client()
    codes = [
        client.post(
            "/api/v1/auth/token/",
            {"username": f"user{i}", "password": "bad"},
            content_type="application/json",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{i}",  # a new "address" every time
        ).status_code
        for i in range(12)
    ]
    assert codes[:10] == [401] * 10
    assert codes[10:] == [429, 429]


def test_login_is_throttled_per_user_name_across_clients(fresh_cache, settings):
    from django.test import Client

    # A name's budget is 30/min by default (more than one client's: test_login_lockout);
    # 10 here keeps the test short.
    settings.LOGIN_THROTTLE_PER_USERNAME = "10/min"

    codes = [
        Client(REMOTE_ADDR=f"192.0.2.{i}")
        .post(
            "/api/v1/auth/token/",
            {"username": "Alice", "password": "bad"},
            content_type="application/json",
        )
        .status_code
        for i in range(12)
    ]
    assert codes[:10] == [401] * 10
    assert codes[10:] == [429, 429]
    body = Client(REMOTE_ADDR="192.0.2.200").post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": "x"},
        content_type="application/json",
    )
    assert body.status_code == 429 and body.json()["error"]["code"] == "throttled"
    assert int(body["Retry-After"]) > 0


def test_the_per_user_name_limit_holds_whatever_the_encoding(fresh_cache, settings):
    """Issue 28, finding 2: every way of sending a user name that sign-in accepts counts
    against that name's one budget: content types DRF's parser takes besides
    ``application/json`` (``*/*``, ``application/*``, another charset; multipart is
    refused with 415 before any password is checked), and
    names Django's sign-in normalises (NFKC, surrounding spaces, case)."""
    import json

    from django.test import Client

    from tests.factories import make_customer

    settings.LOGIN_THROTTLE_PER_USERNAME = "10/min"  # 30 by default; 10 keeps the test short
    make_customer("bob")
    as_json = json.dumps({"username": "bob", "password": "pw-bob"})
    for content_type in ("*/*", "application/*"):  # DRF reads these as JSON: a real sign-in
        signed_in = Client().post("/api/v1/auth/token/", as_json, content_type=content_type)
        assert signed_in.status_code == 200, content_type

    def api(name: str, content_type: str):  # the client encodes to the content type's charset
        body = json.dumps({"username": name, "password": "bad"}, ensure_ascii=False)
        return ("/api/v1/auth/token/", body, content_type)

    attempts = [
        api("alice", "*/*"),
        api("alice", "application/*"),
        api("alice", "*/*; charset=utf-16"),
        api("ａｌｉｃｅ", "application/*"),  # fullwidth: NFKC makes it "alice"
        api("\u3000Alice ", "*/*"),
        ("/accounts/login/", {"username": "ａlice", "password": "bad"}, None),
        ("/admin/login/", {"username": " ALICE", "password": "bad"}, None),
        api("alicE", "application/json; charset=utf-8"),
        ("/accounts/login/", {"username": "ａlice", "password": "bad"}, None),
        api("alice", "application/*"),
    ]
    codes = []
    for i, (path, body, content_type) in enumerate(attempts):
        client = Client(REMOTE_ADDR=f"192.0.2.{i}")
        sent = client.post(path, body, **({"content_type": content_type} if content_type else {}))
        codes.append(sent.status_code)
    # Each was a sign-in attempt the view processed: 401 (API) or the form again (200).
    assert codes == [401] * 5 + [200, 200, 401, 200, 401], codes
    multipart = Client(REMOTE_ADDR="192.0.2.98").post(
        "/api/v1/auth/token/", {"username": "alice", "password": "x"}
    )
    assert multipart.status_code == 415  # not a sign-in attempt: the API reads JSON only
    eleventh = Client(REMOTE_ADDR="192.0.2.99").post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": "x"},
        content_type="application/json",
    )
    assert eleventh.status_code == 429
    assert eleventh.json()["error"]["message"] == "Too many sign-in attempts for this user name."


def test_forwarded_for_is_used_only_as_far_as_the_trusted_proxies(fresh_cache, settings):
    from django.test import Client

    from tracker.accounts.security import client_ip

    settings.TRUSTED_PROXY_COUNT = 1
    meta = {"REMOTE_ADDR": "172.18.0.5", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 203.0.113.9"}
    assert client_ip(meta) == "203.0.113.9"  # what our proxy saw; the spoofed entry is ignored
    settings.TRUSTED_PROXY_COUNT = 0
    assert client_ip(meta) == "172.18.0.5"
    settings.TRUSTED_PROXY_COUNT = 1
    codes = [
        Client(REMOTE_ADDR="172.18.0.5")
        .post(
            "/api/v1/auth/token/",
            {"username": f"user{i}", "password": "bad"},
            content_type="application/json",
            HTTP_X_FORWARDED_FOR=f"10.9.9.{i}, 203.0.113.{i}",  # one real client per request
        )
        .status_code
        for i in range(12)
    ]
    assert codes == [401] * 12  # twelve different clients behind one proxy: none throttled


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_browser_and_admin_sign_in_are_throttled(fresh_cache, path):
    from django.test import Client

    client = Client()
    codes = [
        client.post(path, {"username": f"op{i}", "password": "bad"}).status_code for i in range(12)
    ]
    assert codes[:10] == [200] * 10  # the form again, with an error
    assert codes[10:] == [429, 429]
    per_user = [  # API_THROTTLE_LOGIN_USERNAME: 30/min, from any clients
        Client(REMOTE_ADDR=f"198.51.100.{i}").post(path, {"username": "operator", "password": "x"})
        for i in range(31)
    ]
    assert [r.status_code for r in per_user][-1] == 429


# --------------------------------------------------------------------------- admin edits


def test_the_order_admin_cannot_change_who_owns_cooks_carries_or_where_it_goes():
    """An admin edit writes no outbox event: Pinot, the lists and the sockets would keep
    the old owner. So the admin must not be able to make one."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from rest_framework.test import APIClient

    from tests.factories import make_courier, make_customer, make_restaurant, place
    from tracker.orders.models import Order
    from tracker.outbox.models import OutboxEvent

    alice, bob = make_customer("alice"), make_customer("bob")
    restaurant, elsewhere = make_restaurant(), make_restaurant("Elsewhere")
    rider = make_courier("rider")
    order = place(alice, restaurant)
    events_before = OutboxEvent.objects.count()
    operator = get_user_model().objects.create_superuser("ops", password="pw-ops-long")
    admin = Client()
    admin.force_login(operator)
    url = f"/admin/orders/order/{order.pk}/change/"
    form = admin.get(url)
    assert form.status_code == 200
    for field in ("customer", "restaurant", "courier", "delivery_address", "delivery_lat",
                  "delivery_lon"):  # fmt: skip
        assert f'name="{field}"' not in form.content.decode(), field
    admin.post(
        url,
        {
            "customer": bob.pk, "restaurant": elsewhere.pk, "courier": rider.pk,
            "delivery_address": "Somewhere else", "delivery_lat": "13.1", "delivery_lon": "77.1",
            "items-TOTAL_FORMS": "0", "items-INITIAL_FORMS": "0",
            "status_changes-TOTAL_FORMS": "0", "status_changes-INITIAL_FORMS": "0",
        },
    )  # fmt: skip
    saved = Order.objects.get(pk=order.pk)
    assert (saved.customer_id, saved.restaurant_id, saved.courier_id) == (
        alice.pk, restaurant.pk, None,
    )  # fmt: skip
    assert (saved.delivery_address, saved.delivery_lat) == (
        order.delivery_address,
        order.delivery_lat,
    )
    assert OutboxEvent.objects.count() == events_before
    # The system of record still agrees with the event stream on the owner: bob, whom the
    # form named, gets the same 404 as for any order that is not his.
    as_bob = APIClient()
    as_bob.force_authenticate(bob.user)
    assert as_bob.get(f"/api/v1/orders/{order.pk}/").status_code == 404


# --------------------------------------------------------------------------- future GPS points


def test_gps_points_more_than_30_seconds_ahead_are_refused(kafka_topics):
    from datetime import timedelta

    from django.utils import timezone
    from rest_framework.test import APIClient

    from contract.events import EventValidationError, Topic, parse_event
    from runtime import kafka
    from tests.factories import make_courier, make_customer, make_restaurant, place
    from tracker.orders import services

    order = place(make_customer("alice"), make_restaurant())
    rider = make_courier("rider")
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    order = services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=rider)
    client = APIClient()
    client.force_authenticate(rider.user)
    url = f"/api/v1/orders/{order.pk}/locations/"

    def ahead(seconds: float) -> str:
        return (timezone.now() + timedelta(seconds=seconds)).isoformat()

    # Two minutes ahead: inside the event contract's 5-minute skew, so accepted before.
    batch = client.post(
        url,
        {"points": [{"lat": 12.9, "lon": 77.6, "recorded_at": ahead(0)},
                    {"lat": 12.91, "lon": 77.6, "recorded_at": ahead(120)}]},
        format="json",
    )  # fmt: skip
    assert batch.status_code == 400
    assert "points[1].recorded_at" in batch.json()["error"]["fields"]
    single = client.post(url, {"lat": 12.9, "lon": 77.6, "recorded_at": ahead(60)}, format="json")
    assert single.status_code == 400 and "recorded_at" in single.json()["error"]["fields"]
    assert kafka.read_topic(Topic.DELIVERY_LOCATIONS, idle_timeout=0.3) == []  # nothing sent
    # A device clock a few seconds fast is fine.
    ok = client.post(url, {"lat": 12.92, "lon": 77.6, "recorded_at": ahead(10)}, format="json")
    assert ok.status_code == 202
    sent = kafka.read_topic(Topic.DELIVERY_LOCATIONS, idle_timeout=0.3)
    assert [parse_event(Topic.DELIVERY_LOCATIONS, r.value).lat for r in sent] == [12.92]
    # The service refuses them too, whoever calls it (simulator, admin, a future endpoint).
    with pytest.raises(EventValidationError, match="in the future"):
        services.record_locations(
            [
                services.LocationPoint(
                    order, rider, 12.9, 77.6, timezone.now() + timedelta(minutes=2)
                )
            ]
        )


# --------------------------------------------------------------------------- huge numbers


def test_a_400_digit_coordinate_in_a_polygon_is_a_400_not_a_500():
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    operator = get_user_model().objects.create_user("ops", is_staff=True)
    client = APIClient()
    client.force_authenticate(operator)
    huge = int("9" * 400)
    response = client.post(
        "/api/v1/operations/deliveries-in-area/",
        {"type": "Polygon", "coordinates": [[[huge, 12.9], [77.7, 12.9], [77.7, 13.0], [huge, 12.9]]]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"coordinates[0][0]": ["out of range"]}


def test_json_nested_thousands_of_levels_deep_is_a_400_not_a_500():
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("ops", is_staff=True))
    for body in (
        "[" * 100_000 + "]" * 100_000,
        '{"type": "Polygon", "coordinates": ' + "[" * 40 + "]" * 40 + "}",
    ):
        response = client.generic(
            "POST", "/api/v1/operations/deliveries-in-area/", body, content_type="application/json"
        )
        assert response.status_code == 400
        assert "nested" in response.json()["error"]["message"]

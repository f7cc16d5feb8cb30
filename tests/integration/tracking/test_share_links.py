"""Shared tracking links (issue 56, item 2): made by an order's customer, stored hashed, ended
by revocation, age or the order's end, and opening one page of one order and nothing else.

Everything here needs only the database (and Django's test client): the links, the REST
endpoints, the share page and its headers, and the log lines the token must stay out of.
What the link's socket sends is in tests/integration/live/test_live_share.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework.throttling import ScopedRateThrottle

from runtime import logs
from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.orders import policy, services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.sharing import selectors, tokens
from tracker.sharing import services as sharing
from tracker.sharing.models import ShareLink

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
PRIVATE = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Robots-Tag": "noindex"}


@pytest.fixture
def world():
    alice, bob = make_customer("alice"), make_customer("bob")
    restaurant = make_restaurant()
    order = place(alice, restaurant)
    chef = get_user_model().objects.create_user("chef", password="pw-chef")
    restaurant.staff.add(chef)
    return {
        "alice": alice,
        "bob": bob,
        "order": order,
        "chef": chef,
        "other": place(bob, restaurant),
    }


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _finish(order: Order, status: str = "DELIVERED", *, ago: timedelta) -> None:
    """Move ``order`` to ``status`` as the services do, ``ago`` in the past."""
    at = timezone.now() - ago
    if status == "CANCELLED":
        services.cancel_order(order.pk, by=SYSTEM, at=at)
        return
    make_courier(f"rider{order.pk}")  # the first step on the road picks a courier
    for _ in range(6):  # confirmed .. delivered
        services.advance_order(order.pk, by=SYSTEM, at=at)


# ---------------------------------------------------------------------- the token


def test_a_token_has_256_random_bits_and_only_its_hash_is_stored(world):
    link, token = sharing.create_link(world["order"].pk, by=world["alice"].user)
    assert tokens.well_formed(token) and len(token) == 43  # 32 bytes, URL-safe base64
    assert link.token_hash == tokens.digest(token) and len(link.token_hash) == 64
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ShareLink._meta.db_table}")
        stored = [str(value) for row in cursor.fetchall() for value in row]
    assert not any(token in value for value in stored)
    others = {sharing.create_link(world["order"].pk, by=world["alice"].user)[1] for _ in range(3)}
    assert token not in others and len(others) == 3


def test_a_link_opens_its_own_order_and_only_that_order(world):
    link, token = sharing.create_link(world["order"].pk, by=world["alice"].user)
    holder = selectors.holder_for(token)
    assert (holder.order_id, holder.link_id) == (world["order"].pk, link.pk)
    assert policy.can_see(holder, world["order"].pk)
    assert not policy.can_see(holder, world["other"].pk)
    assert list(policy.visible_orders(holder)) == [world["order"]]
    # To every other question the holder is nobody.
    assert not policy.can_cancel(holder, world["order"])
    assert not policy.can_move_to(holder, world["order"], "ORDER_CONFIRMED")
    assert not policy.can_share(holder, world["order"])
    assert policy.roles_of(holder) == []


def test_guessed_malformed_revoked_and_expired_tokens_all_fail_alike(world, settings):
    order, alice = world["order"], world["alice"].user
    _, revoked = sharing.create_link(order.pk, by=alice)
    sharing.revoke_links(order.pk, by=alice)
    _, old = sharing.create_link(order.pk, by=alice, at=timezone.now() - timedelta(hours=25))
    guessed = tokens.new_token()
    for token in (guessed, revoked, old, "short", guessed + "x", "../" + guessed, ""):
        assert selectors.holder_for(token) is None, token
    _, fresh = sharing.create_link(order.pk, by=alice)
    assert selectors.holder_for(fresh) is not None


def test_a_link_ends_after_its_maximum_age(world, settings):
    settings.SHARE_LINK_MAX_AGE = timedelta(hours=2)
    made = timezone.now() - timedelta(hours=1)
    link, token = sharing.create_link(world["order"].pk, by=world["alice"].user, at=made)
    assert link.expires_at == made + timedelta(hours=2)
    holder = selectors.holder_for(token)
    assert holder.ends_at == made + timedelta(hours=2)
    later = made + timedelta(hours=2, seconds=1)
    assert selectors.holder_for_digest(tokens.digest(token), now=later) is None
    # A setting changed later does not lengthen a link already given out.
    settings.SHARE_LINK_MAX_AGE = timedelta(hours=24)
    assert selectors.holder_for_digest(tokens.digest(token), now=later) is None


@pytest.mark.parametrize("status", ["DELIVERED", "CANCELLED"])
def test_a_link_ends_its_grace_after_the_order_does(world, settings, status):
    settings.SHARE_LINK_GRACE = timedelta(minutes=30)
    order = world["order"]
    _, token = sharing.create_link(order.pk, by=world["alice"].user)
    _finish(order, status, ago=timedelta(minutes=29))
    holder = selectors.holder_for(token)
    assert holder is not None
    order.refresh_from_db()
    assert holder.ends_at == order.status_changed_at + timedelta(minutes=30)
    Order.objects.filter(pk=order.pk).update(
        status_changed_at=timezone.now() - timedelta(minutes=31)
    )
    assert selectors.holder_for(token) is None


def test_the_maximum_age_cannot_be_set_beyond_a_day():
    def start(hours: str) -> subprocess.CompletedProcess:
        code = "import django; django.setup(); print('started')"
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings",
               "SHARE_LINK_MAX_AGE_HOURS": hours}  # fmt: skip
        return subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
        )

    refused = start("25")
    assert refused.returncode != 0 and "at most 24" in refused.stderr
    assert start("24").stdout.strip() == "started"


def test_only_the_orders_customer_makes_links_and_the_order_must_still_run(world, settings):
    order = world["order"]
    with pytest.raises(policy.NotVisible):
        sharing.create_link(order.pk, by=world["bob"].user)
    with pytest.raises(PermissionDenied):  # staff see the order, but it is not theirs
        sharing.create_link(order.pk, by=world["chef"])
    settings.SHARE_MAX_LINKS_PER_ORDER = 2
    for _ in range(2):
        sharing.create_link(order.pk, by=world["alice"].user)
    with pytest.raises(sharing.ShareRefused, match="already has 2 working links"):
        sharing.create_link(order.pk, by=world["alice"].user)
    assert sharing.revoke_links(order.pk, by=world["alice"].user) == 2
    sharing.create_link(order.pk, by=world["alice"].user)  # a revoked link no longer counts
    _finish(world["other"], "CANCELLED", ago=timedelta(hours=1))
    with pytest.raises(sharing.ShareRefused, match="nothing left to follow"):
        sharing.create_link(world["other"].pk, by=world["bob"].user)


# ---------------------------------------------------------------------- REST


def test_the_customer_makes_lists_and_revokes_links_over_rest(world):
    order, client = world["order"], _api(world["alice"].user)
    path = f"/api/v1/orders/{order.pk}/share/"
    assert client.get(path).json() == []
    made = client.post(path)
    assert made.status_code == 201 and made["Cache-Control"] == "no-store"
    body = made.json()
    assert set(body) == {"id", "created_at", "expires_at", "token", "url"}
    assert body["url"] == f"http://testserver/t/{body['token']}/"
    assert selectors.holder_for(body["token"]).order_id == order.pk
    listed = client.get(path).json()
    assert listed == [{k: body[k] for k in ("id", "created_at", "expires_at")}]
    assert body["token"] not in str(listed)
    assert client.delete(path).status_code == 204
    assert client.get(path).json() == []
    assert selectors.holder_for(body["token"]) is None
    assert client.delete(path).status_code == 204  # nothing left to revoke: still done


def test_another_order_another_customer_and_other_roles_cannot_share(world):
    order = world["order"]
    path = f"/api/v1/orders/{order.pk}/share/"
    bob = _api(world["bob"].user)
    assert [bob.get(path).status_code, bob.post(path).status_code] == [404, 404]
    assert bob.delete(path).status_code == 404
    chef = _api(world["chef"])  # sees the order (its restaurant's), may not share it
    assert [chef.get(path).status_code, chef.post(path).status_code] == [403, 403]
    assert chef.delete(path).status_code == 403
    assert APIClient().post(path).status_code == 401
    missing = _api(world["alice"].user).post("/api/v1/orders/999999/share/")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert ShareLink.objects.count() == 0


def test_a_finished_order_or_too_many_links_answer_409(world, settings):
    settings.SHARE_MAX_LINKS_PER_ORDER = 1
    client = _api(world["alice"].user)
    path = f"/api/v1/orders/{world['order'].pk}/share/"
    assert client.post(path).status_code == 201
    refused = client.post(path)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"
    _finish(world["order"], "CANCELLED", ago=timedelta(hours=1))
    client.delete(path)
    assert client.post(path).status_code == 409


def test_making_and_revoking_links_spend_the_shares_budget(world, monkeypatch):
    monkeypatch.setattr(
        ScopedRateThrottle,
        "THROTTLE_RATES",
        {**ScopedRateThrottle.THROTTLE_RATES, "shares": "3/min"},
    )
    client = _api(world["alice"].user)
    path = f"/api/v1/orders/{world['order'].pk}/share/"
    codes = [client.post(path).status_code, client.delete(path).status_code]
    codes += [client.post(path).status_code, client.post(path).status_code]
    assert codes == [201, 204, 201, 429]
    assert client.get(path).status_code == 200  # reading the list is free


def test_the_token_opens_no_part_of_the_api(world):
    _, token = sharing.create_link(world["order"].pk, by=world["alice"].user)
    as_header = APIClient()
    as_header.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    for path in (f"/api/v1/orders/{world['order'].pk}/", "/api/v1/orders/", "/api/v1/me/"):
        assert as_header.get(path).status_code == 401, path
        assert APIClient().get(path, {"token": token}).status_code == 401, path
    # Even from a browser signed in as someone else, the token adds nothing.
    bob = Client()
    bob.force_login(world["bob"].user)
    assert bob.get(f"/api/v1/orders/{world['order'].pk}/", {"token": token}).status_code == 404


# ---------------------------------------------------------------------- the page


def test_the_share_page_opens_without_sign_in_and_says_nothing_of_the_order(world):
    _, token = sharing.create_link(world["order"].pk, by=world["alice"].user)
    page = Client().get(f"/t/{token}/")
    assert page.status_code == 200
    for name, value in PRIVATE.items():
        assert page[name] == value
    html = page.content.decode()
    assert 'name="robots" content="noindex"' in html
    assert "frontend/js/pages/share.js" in html
    order = world["order"]
    for private in (token, "alice", order.delivery_address, str(order.total), "Test Pizza"):
        assert private not in html, private
    assert "Sign out" not in html and "/api/v1/" not in html


def test_every_failing_link_gets_the_same_404_with_the_private_headers(world):
    order, alice = world["order"], world["alice"].user
    _, revoked = sharing.create_link(order.pk, by=alice)
    sharing.revoke_links(order.pk, by=alice)
    _, old = sharing.create_link(order.pk, by=alice, at=timezone.now() - timedelta(days=2))
    guessed = tokens.new_token()
    pages = {
        path: Client().get(path)
        for path in (f"/t/{guessed}/", f"/t/{revoked}/", f"/t/{old}/", "/t/short/",
                     f"/t/{guessed}", f"/t/{guessed}/more/")
    }  # fmt: skip
    bodies = set()
    for path, page in pages.items():
        assert page.status_code == 404, path
        assert {name: page[name] for name in PRIVATE} == PRIVATE, path
        bodies.add(page.content)
    assert len(bodies) == 1  # nothing tells a revoked or ended link from a guess
    _, works = sharing.create_link(order.pk, by=alice)
    assert Client().get(f"/t/{works}").status_code == 200  # without the slash too
    posted = Client(enforce_csrf_checks=True).post(f"/t/{works}/")
    assert posted.status_code == 405 and posted["Referrer-Policy"] == "no-referrer"


def test_share_page_views_are_limited_per_address_before_the_token_is_looked_up(world, settings):
    settings.SHARE_VIEW_RATE = "3/min"
    _, token = sharing.create_link(world["order"].pk, by=world["alice"].user)
    guesses = [Client().get(f"/t/{tokens.new_token()}/").status_code for _ in range(3)]
    limited = Client().get(f"/t/{token}/")
    assert guesses == [404, 404, 404]
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
    assert {name: limited[name] for name in PRIVATE} == PRIVATE
    other = Client(REMOTE_ADDR="10.0.0.9").get(f"/t/{token}/")
    assert other.status_code == 200  # another address has its own budget


# ---------------------------------------------------------------------- the admin


def test_the_admin_shows_links_read_only_and_revokes_through_the_service(world, rf):
    _, token = sharing.create_link(world["order"].pk, by=world["alice"].user)
    link = ShareLink.objects.get()
    root = get_user_model().objects.create_superuser("root", password="x" * 12)
    request = rf.get("/admin/")
    request.user = root
    link_admin = admin.site._registry[ShareLink]
    assert not link_admin.has_add_permission(request)
    assert not link_admin.has_change_permission(request, link)
    assert not link_admin.has_delete_permission(request, link)
    assert "delete_selected" not in link_admin.get_actions(request)
    browser = Client()
    browser.force_login(root)
    page = browser.get(f"/admin/sharing/sharelink/{link.pk}/change/")
    assert page.status_code == 200 and link.token_hash not in page.content.decode()
    assert browser.get(f"/admin/sharing/sharelink/{link.pk}/delete/").status_code == 403
    done = browser.post(
        "/admin/sharing/sharelink/",
        {"action": "revoke", "_selected_action": [link.pk], "index": 0},
    )
    assert done.status_code == 302
    link.refresh_from_db()
    assert link.revoked_at is not None and selectors.holder_for(token) is None


# ---------------------------------------------------------------------- logs


class _Lines(logging.Handler):
    """Every line written through any logger, as the console handler would format it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def log_lines():
    handler = _Lines()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn.error"),
               logging.getLogger("uvicorn.access"), logging.getLogger("django.server")]  # fmt: skip
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield handler.lines
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_tokens_are_taken_out_of_every_log_record(log_lines):
    token = tokens.new_token()
    api_key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    logging.getLogger("django.request").warning("Not Found: %s", f"/t/{token}/")
    logging.getLogger("uvicorn.error").info(
        '%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", f"/ws/share/{token}/"
    )
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", f"/t/{token}/", "1.1", 200
    )
    logging.getLogger("django.server").info('"GET /t/%s/ HTTP/1.1" 404 0', token)
    logging.getLogger("tracker").info(
        "as an object: %s", {"url": f"https://shop.example/t/{token}/"}
    )
    logging.getLogger("uvicorn.error").info(
        '%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", f"/ws/orders/1/?since=3&token={api_key}"
    )
    logging.getLogger("uvicorn.error").info(
        '%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", f"/ws/operations/?ticket={api_key}"
    )
    try:
        raise ValueError(f"No route found for path '/ws/share/{token}/'.")
    except ValueError:
        logging.getLogger("tracker").exception("a failure")
    text = "\n".join(log_lines)
    assert token not in text and api_key not in text
    assert text.count("[redacted]") >= 8
    assert "/t/[redacted]/" in text and "/ws/share/[redacted]/" in text
    assert "since=3&token=[redacted]" in text  # the rest of the line is kept
    assert logs.redact("/ws/orders/12/ and /api/v1/orders/") == "/ws/orders/12/ and /api/v1/orders/"


def test_a_failing_link_leaves_no_token_in_djangos_request_log(world, log_lines):
    guessed = tokens.new_token()
    assert Client().get(f"/t/{guessed}/").status_code == 404
    assert Client().get(f"/t/{guessed}/more/").status_code == 404
    assert Client().get("/api/v1/unknown/", {"token": guessed}).status_code == 404
    text = "\n".join(log_lines)
    assert "Not Found: /t/[redacted]/" in text
    assert guessed not in text


@pytest.mark.django_db(transaction=True)
def test_the_asgi_servers_own_lines_keep_no_token(log_lines):
    """uvicorn serving the app, access log on: its request lines, and the WebSocket
    handshake lines it writes even with --no-access-log, name the path."""
    from websockets.asyncio.client import connect

    from tests.fixtures_browser import ServerThread

    alice = make_customer("alice")
    order = place(alice, make_restaurant())
    _, token = sharing.create_link(order.pk, by=alice.user)
    guessed = tokens.new_token()
    server = ServerThread(log_config=None, log_level=None, access_log=True).start()
    try:
        assert urllib.request.urlopen(f"{server.url}/t/{token}/", timeout=10).status == 200
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{server.url}/t/{guessed}/", timeout=10)

        async def socket() -> dict:
            async with connect(f"ws://127.0.0.1:{server.port}/ws/share/{guessed}/") as ws:
                return json.loads(await asyncio.wait_for(ws.recv(), 10))

        refused = asyncio.run(socket())
        assert refused["type"] == "error" and refused["code"] == 4404
    finally:
        server.stop()
    text = "\n".join(log_lines)
    assert re.search(r"GET /t/\[redacted\]/ HTTP/1\.1\" 200", text), text
    assert '"WebSocket /ws/share/[redacted]/" [accepted]' in text, text
    assert token not in text and guessed not in text

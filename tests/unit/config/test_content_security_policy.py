"""Every answer carries a strict Content-Security-Policy and ``Permissions-Policy:
geolocation=(self)`` (issue 69, N9), and the pages give the policy nothing to refuse.

The pages load only their own module scripts and style sheets (a JSON data block is data,
not script), so the policy allows no inline script or style, no ``eval``, no plugin, no
framing and no foreign form target; map tiles, when configured (``MAP_TILE_URL``), are the
one foreign origin an image may come from. The browser tests fail on any violation
(``tests/fixtures_browser.py``).
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.accounts.security import content_security_policy

pytestmark = pytest.mark.django_db

#: The directives (and their only sources) every page's policy must have.
REQUIRED = {
    "default-src": {"'self'"},
    "script-src": {"'self'"},
    "style-src": {"'self'"},
    "object-src": {"'none'"},
    "base-uri": {"'none'"},
    "frame-ancestors": {"'none'"},
    "form-action": {"'self'"},
    "worker-src": {"'self'"},
}


def directives(header: str) -> dict[str, set[str]]:
    parsed = {}
    for part in filter(None, (p.strip() for p in header.split(";"))):
        name, *sources = part.split()
        parsed[name] = set(sources)
    return parsed


class _Inline(HTMLParser):
    """What in a page a strict policy refuses: inline scripts, handlers, style."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script" and "src" not in named and named.get("type") != "application/json":
            self._in_script = True
            self.found.append(f"inline <script {named}>")
        if tag == "style":
            self.found.append("inline <style>")
        for name, value in attrs:
            if name.startswith("on") or name == "style":
                self.found.append(f"<{tag} {name}={value!r}>")
            if name in ("href", "src", "action") and (value or "").startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")


def _pages() -> dict[str, Client]:
    """Each page, as a user who may see it (and the anonymous ones)."""
    anonymous = Client()
    customer, restaurant, courier = make_customer(), make_restaurant(), make_courier()
    order = place(customer, restaurant)
    operator = get_user_model().objects.create_user("ops", password="pw-ops", is_staff=True)
    restaurant.staff.add(get_user_model().objects.create_user("cook", password="pw-cook"))
    as_user = {}
    for name, user in {"customer": customer.user, "courier": courier.user,
                       "operator": operator, "staff": restaurant.staff.get()}.items():  # fmt: skip
        client = Client()
        client.force_login(user)
        as_user[name] = client
    c = as_user["customer"]
    return {
        "/accounts/login/": anonymous,
        "/t/no-such-link/": anonymous,
        "/admin/login/": anonymous,
        "/api/docs/": anonymous,
        "/": c,
        f"/orders/{order.pk}/": c,
        "/order/new/": c,
        "/addresses/": c,
        "/settings/notifications/": c,
        "/sw.js": anonymous,
        "/courier/": as_user["courier"],
        "/operations/": as_user["operator"],
        "/restaurant/": as_user["staff"],
        "/restaurant/board/": as_user["staff"],
        "/api/v1/me/": c,
    }


def test_every_answer_has_a_strict_policy_and_geolocation_for_itself_only(monkeypatch):
    monkeypatch.setenv("PINOT_BROKER_URL", "http://127.0.0.1:9")  # pages need no store
    for path, client in _pages().items():
        answer = client.get(path)
        assert answer.status_code in (200, 404), (path, answer.status_code)
        policy = directives(answer.get("Content-Security-Policy", ""))
        for name, sources in REQUIRED.items():
            if path == "/api/docs/" and name == "style-src":
                continue  # Swagger UI's own inline style sheet (its page only)
            assert policy.get(name) == sources, (path, name, policy.get(name))
        assert "'unsafe-eval'" not in str(policy) and "'unsafe-inline'" not in str(
            policy.get("script-src")
        ), path
        assert answer["Permissions-Policy"] == "geolocation=(self)", path


def test_no_page_has_inline_script_or_style(monkeypatch):
    monkeypatch.setenv("PINOT_BROKER_URL", "http://127.0.0.1:9")
    for path, client in _pages().items():
        answer = client.get(path)
        if "html" not in answer.get("Content-Type", ""):
            continue
        parser = _Inline()
        parser.feed(answer.content.decode())
        found = [f for f in parser.found if not (path == "/api/docs/" and f == "inline <style>")]
        assert found == [], path


def test_configured_map_tiles_are_the_one_foreign_image_origin():
    tiles = "https://{s}.tiles.example:8443/{z}/{x}/{y}.png"
    assert directives(content_security_policy(tiles))["img-src"] == {
        "'self'",
        "https://*.tiles.example:8443",
    }
    assert directives(content_security_policy(""))["img-src"] == {"'self'"}


def test_the_docs_page_script_is_a_file_of_its_own():
    page = Client().get("/api/docs/")
    script = Client().get("/api/docs/", {"script": ""})
    assert b"/api/docs/?script=" in page.content
    assert script.status_code == 200 and "javascript" in script["Content-Type"]
    assert b"SwaggerUIBundle" in script.content

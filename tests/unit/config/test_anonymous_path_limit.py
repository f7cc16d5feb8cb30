"""Anonymous paths (health and readiness, share pages, the sign-in page, the API's docs) have
a per-client cap answered at the ASGI layer, before a request waits for one of the web
threads: one client looping on them cannot fill the request queue (issue 69, N7)."""

from __future__ import annotations

import asyncio

import pytest


def request(path: str, client: str = "203.0.113.7", headers=()) -> dict:
    return {"type": "http", "method": "GET", "path": path, "client": (client, 5000),
            "headers": list(headers), "query_string": b""}  # fmt: skip


def serve(app, scope: dict) -> int:
    """The status ``app`` answers ``scope`` with."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


async def ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize(
    "path", ["/healthz", "/readyz", "/t/not-a-token/", "/accounts/login/", "/api/docs/"]
)
def test_one_client_looping_on_an_anonymous_path_is_refused_before_the_queue(settings, path):
    from config.asgi_limits import AnonymousPathLimit

    settings.ANONYMOUS_PATH_RATE, settings.ANONYMOUS_PATH_BURST = 1.0, 5
    app = AnonymousPathLimit(ok, clock=lambda: 1000.0)
    assert [serve(app, request(path)) for _ in range(6)] == [200] * 5 + [429]
    assert serve(app, request(path, client="198.51.100.9")) == 200  # another client: its own
    assert serve(app, request("/api/v1/me/")) == 200  # signed-in paths: their own budgets


def test_the_cap_refills_and_keys_an_ipv6_client_on_its_64(settings):
    from config.asgi_limits import AnonymousPathLimit

    settings.ANONYMOUS_PATH_RATE, settings.ANONYMOUS_PATH_BURST = 1.0, 2
    now = [1000.0]
    app = AnonymousPathLimit(ok, clock=lambda: now[0])
    statuses = [serve(app, request("/healthz", client=f"2001:db8::{i}")) for i in range(3)]
    assert statuses == [200, 200, 429]
    now[0] += 1
    assert serve(app, request("/healthz", client="2001:db8::99")) == 200

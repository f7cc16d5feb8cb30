"""ASGI wrappers: refuse oversized HTTP bodies before Django buffers them, and cap each
client's requests to the anonymous paths before they wait for a thread
(:class:`AnonymousPathLimit`).

Django's ASGI handler reads the whole body (to memory, then a temporary file)
before any middleware runs. This wrapper answers 413 at once when the declared
``Content-Length`` is over ``REQUEST_MAX_BODY_BYTES``, and cuts off a body sent
without one (chunked) as soon as it passes the limit: Django sees the client
disconnect and stops reading, and the client gets the 413.

Its refusals, and those of :mod:`config.asgi_threads` (a request no thread could serve
in time), are answered by :func:`send_refusal` in the shape Django's would have
(:func:`error_body`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings

from tracker.accounts.security import client_ip


def error_body(path: str, status: int, code: str, message: str) -> tuple[bytes, bytes]:
    """A refusal's body and content type, for an answer given before Django runs, as
    :func:`config.middleware.error_response` gives it once Django runs: the API's error
    shape (api/errors.py) under ``/api/``, plain text elsewhere."""
    if path.startswith("/api/"):
        body = {"error": {"status": status, "code": code, "message": message}}
        return json.dumps(body).encode(), b"application/json"
    return message.encode(), b"text/plain; charset=utf-8"


async def send_refusal(
    send: Any,
    status: int,
    body: bytes,
    content_type: bytes,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer a request at the ASGI layer: ``status``, ``body`` and any further headers."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    """Wraps the HTTP app: 413 for a body over ``REQUEST_MAX_BODY_BYTES``, declared or streamed."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.REQUEST_MAX_BODY_BYTES
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0 or length > limit:
                await self._refuse(scope, send, 413 if length > limit else 400, limit)
                return
        received = 0
        over = False
        started = False

        async def limited_receive() -> dict:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, tracking_send)
        if over and not started:
            await self._refuse(scope, send, 413, limit)

    async def _refuse(self, scope: dict, send: Any, status: int, limit: int) -> None:
        if status == 413:
            message = f"Request body is over the {limit}-byte limit."
            body, content_type = error_body(scope.get("path", ""), 413, "too_large", message)
        else:
            body, content_type = b"Content-Length must be a number >= 0.", b"text/plain"
        await send_refusal(send, status, body, content_type, ((b"connection", b"close"),))


#: Paths anyone may request without signing in, each served by a web thread: health and
#: readiness, share pages (a miss costs a lookup), the sign-in page, the API's docs.
ANONYMOUS_PATHS = ("/healthz", "/readyz", "/t/", "/accounts/login/", "/api/docs/", "/api/schema/")


class AnonymousPathLimit:
    """Wraps the HTTP app: a token bucket per client (its /64 for IPv6, as every budget keys
    it) for :data:`ANONYMOUS_PATHS`, ``ANONYMOUS_PATH_BURST`` requests refilled at
    ``ANONYMOUS_PATH_RATE`` a second; beyond it 429 with ``Retry-After``, before the request
    waits for a thread. Kept in the process (no cache round trip on the event loop), so each
    web worker holds its own; idle clients are dropped once full again."""

    def __init__(self, app: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.app, self.clock = app, clock
        self.buckets: dict[str, tuple[float, float]] = {}  # client: (tokens, at)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith(ANONYMOUS_PATHS):
            wait = self.take(self.client(scope))
            if wait is not None:
                body, content_type = error_body(path, 429, "throttled", "Too many requests.")
                retry = (b"retry-after", str(math.ceil(wait)).encode())
                await send_refusal(send, 429, body, content_type, (retry,))
                return
        await self.app(scope, receive, send)

    @staticmethod
    def client(scope: dict) -> str:
        headers = dict(scope.get("headers") or [])
        meta = {"REMOTE_ADDR": (scope.get("client") or ("",))[0]}
        if b"x-forwarded-for" in headers:
            meta["HTTP_X_FORWARDED_FOR"] = headers[b"x-forwarded-for"].decode("latin-1")
        return client_ip(meta)

    def take(self, client: str) -> float | None:
        """One request's token: None when there was one, else the seconds until there is."""
        rate, burst = settings.ANONYMOUS_PATH_RATE, settings.ANONYMOUS_PATH_BURST
        now = self.clock()
        tokens, at = self.buckets.get(client, (burst, now))
        tokens = min(burst, tokens + (now - at) * rate)
        if tokens < 1:
            self.buckets[client] = (tokens, now)
            return (1 - tokens) / rate
        self.buckets[client] = (tokens - 1, now)
        if len(self.buckets) > 10_000:  # forget clients whose bucket has refilled
            full = now - burst / rate
            self.buckets = {c: b for c, b in self.buckets.items() if b[1] > full}
        return None

"""Django middleware: request-body cap, login throttles, request latency (see
:mod:`tracker.accounts.security`) and the Content-Security-Policy of every answer.

Both answer in the API's error format under ``/api/`` and in plain text elsewhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import Histogram

from api.errors import UNAVAILABLE_RETRY_AFTER_S
from frontend.views import MAP_TILE_ENV
from runtime.conf import env_str
from runtime.redis_errors import REDIS_UNREACHABLE
from tracker.accounts.security import (
    DEVICE_COOKIE,
    PERMISSIONS_POLICY,
    LoginRateLimiter,
    client_ip,
    content_security_policy,
    device_cookie,
)

log = logging.getLogger(__name__)

REQUEST_DURATION = Histogram(
    "ordertrack_http_request_duration_seconds",
    "Time to answer an HTTP request, by route pattern, method and status class",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def error_response(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """The API's one error shape (see api/errors.py) under /api/, plain text elsewhere."""
    if request.path.startswith("/api/"):
        body = {"error": {"status": status, "code": code, "message": message}}
        return JsonResponse(body, status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


class RequestSizeLimitMiddleware:
    """413 for a declared body over ``REQUEST_MAX_BODY_BYTES``, before anything reads it.

    Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` guards only form parsing; DRF's JSON
    parser reads the raw stream, so without this a multi-gigabyte POST to any API
    endpoint would be read into memory. (A body sent without Content-Length is
    read by Django as empty; the ASGI wrapper in :mod:`config.asgi_limits` stops
    such streams before Django buffers them.)
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if length < 0:
            return error_response(request, 400, "invalid", "Content-Length must be a number >= 0.")
        limit = settings.REQUEST_MAX_BODY_BYTES
        if length > limit:
            return error_response(
                request, 413, "too_large", f"Request body is over the {limit}-byte limit."
            )
        return self.get_response(request)


class LoginThrottleMiddleware:
    """Throttle every login path, per client address and per user name (429 + Retry-After);
    a successful sign-in leaves a device cookie, whose later attempts at that name spend
    their own budget instead of the name's (:class:`~tracker.accounts.security.LoginRateLimiter`).

    While the attempts cannot be counted (Redis unreachable) every sign-in is refused with
    503 + Retry-After, as the API refuses what it cannot count (:mod:`api.errors`): a
    guesser must not get unlimited tries out of an outage."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path not in settings.LOGIN_PATHS:
            return self.get_response(request)
        username = _username(request)
        try:
            refusal = LoginRateLimiter().attempt(
                client=client_ip(request.META),
                username=username,
                device=request.COOKIES.get(DEVICE_COOKIE),
            )
        except REDIS_UNREACHABLE as exc:
            log.warning("503: sign-in attempts cannot be counted: %s", exc)
            response = error_response(
                request, 503, "unavailable", "Sign-in is unavailable right now; retry shortly."
            )
            response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_S)
            return response
        if refusal is not None:
            response = error_response(request, 429, "throttled", refusal.reason)
            response["Retry-After"] = str(refusal.retry_after)
            return response
        response = self.get_response(request)
        if username and _signed_in(request, response):
            response.set_cookie(
                DEVICE_COOKIE,
                device_cookie(username),
                max_age=settings.LOGIN_DEVICE_DAYS * 86400,
                secure=settings.SESSION_COOKIE_SECURE,
                httponly=True,
                samesite="Lax",
            )
        return response


def _signed_in(request: HttpRequest, response: HttpResponse) -> bool:
    """Whether the sign-in succeeded: the API answers 200 with a token; the browser and
    admin sign-ins log the session in and redirect (a failure shows the form again)."""
    if request.path.startswith("/api/"):
        return response.status_code == 200
    return response.status_code == 302 and request.user.is_authenticated


def _username(request: HttpRequest) -> str | None:
    """The user name an attempt is for, read the way the login it guards will read it.

    The API's sign-in reads its body with DRF's parsers, which also take ``*/*``,
    ``application/*``, any charset and multipart; the browser and admin sign-ins read the
    form. Parsing here with the same parsers leaves no encoding that the view accepts and
    this does not see. The body is already size-capped (RequestSizeLimitMiddleware).
    """
    try:
        if request.path.startswith("/api/"):
            from rest_framework.request import Request
            from rest_framework.settings import api_settings

            request.body  # noqa: B018 - kept, so the view's own parse reads it again
            parsers = [parser() for parser in api_settings.DEFAULT_PARSER_CLASSES]
            data = Request(request, parsers=parsers).data
        else:
            data = request.POST
        value = data.get("username") if hasattr(data, "get") else None
    except Exception:  # noqa: BLE001 - a body the view cannot parse is no sign-in either
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # a serializer CharField takes numbers as their text
    return value if isinstance(value, str) else None


class RequestLatencyMiddleware:
    """``ordertrack_http_request_duration_seconds`` by route pattern (never the raw path,
    whose ids would make a series per order), method and status class."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = f"/{match.route}" if match is not None and match.route else "unmatched"
        REQUEST_DURATION.labels(route, request.method, f"{response.status_code // 100}xx").observe(
            time.perf_counter() - started
        )
        return response


class SecurityHeadersMiddleware:
    """``Content-Security-Policy`` (:func:`~tracker.accounts.security.content_security_policy`,
    with the configured map tiles' origin) and
    ``Permissions-Policy`` on every answer that has none of its own (a view with other
    needs, such as the API's Swagger UI page, sets its own)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = content_security_policy(env_str(MAP_TILE_ENV, ""))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.policy)
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response

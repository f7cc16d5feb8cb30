"""WebSocket authentication and origin checks.

Browsers authenticate with their session cookie and always send ``Origin``,
which must then be one of ours, scheme, host and port (no cross-site WebSocket hijacking). Mobile apps
send ``Authorization: Token <key>`` (or ``?token=`` where a client library
cannot set headers) and usually no ``Origin``; a token is not ambient
authority, so a missing Origin is fine for them.
"""

from __future__ import annotations

import json
import logging
from importlib import import_module
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AnonymousUser
from django.db import InterfaceError, OperationalError
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from tracker.accounts.security import user_for_token
from tracker.live.messages import CLOSE_UNAVAILABLE

log = logging.getLogger(__name__)


@database_sync_to_async
def _user_for_token(key: str):
    return user_for_token(key) or AnonymousUser()


Credential = tuple[str, str]  # ("token", key) or ("session", session key)


def credential_of(scope: dict) -> Credential | None:
    """What authenticated this socket, so it can be checked again while it is open."""
    if scope.get("auth_token"):
        return ("token", scope["auth_token"])
    session = scope.get("session")
    key = getattr(session, "session_key", None)
    return ("session", key) if key else None


def current_user(credential: Credential | None):
    """The user ``credential`` stands for *now*, or None when it no longer stands for one
    (token revoked or expired, session flushed, password changed since the token was issued
    or the session began, user deactivated). Runs in a database thread.

    Asked when the user is saved (:mod:`tracker.live.signals`), so a password change made
    through the model (admin, ``changepassword``, a reset form, ``set_password`` + ``save``)
    closes the socket (4401) within a second; one that sends no signal (a bulk ``update``)
    at the next periodic re-check, within ``PUSH_RECHECK_SECONDS`` (30)."""
    if credential is None:
        return None
    kind, key = credential
    if kind == "token":
        return user_for_token(key)
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
    user = get_user(SimpleNamespace(session=store))  # checks the hash and is_active
    return user if user.is_authenticated else None


class TokenAuthMiddleware:
    """Signs a WebSocket in by API token (``Authorization: Token`` or ``?token=``), for apps.

    The key stays in the scope so the consumer can re-check it for the socket's whole life.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        key = None
        auth = headers.get(b"authorization", b"").decode()
        if auth.lower().startswith("token "):
            key = auth[6:].strip()
        else:
            key = (parse_qs(scope.get("query_string", b"").decode()).get("token") or [None])[0]
        if key:
            scope = {**scope, "user": await _user_for_token(key), "auth_token": key}
        return await self.app(scope, receive, send)


def trusted_origin(origin: str, scope: dict) -> bool:
    """Whether a browser's ``Origin`` is ours, by scheme, host and port, as Django's CSRF
    check decides for a POST: one of ``CSRF_TRUSTED_ORIGINS`` (``*.`` naming subdomains),
    or the socket's own origin (its scheme and ``Host``, that host being allowed)."""
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in trusted:
        return True
    parsed = urlsplit(origin)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return False
    for pattern in trusted:
        allowed = urlsplit(pattern)
        wildcard = "*" in allowed.netloc and allowed.scheme == parsed.scheme
        if wildcard and is_same_domain(parsed.netloc, allowed.netloc.lstrip("*")):
            return True
    host = dict(scope.get("headers", [])).get(b"host", b"").decode(errors="replace")
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    domain, _ = split_domain_port(host)
    return (
        bool(domain)
        and validate_host(domain, settings.ALLOWED_HOSTS)
        and (origin == f"{scheme}://{host}")
    )


class OriginCheck:
    """Refuse (4403, before opening) a WebSocket whose ``Origin`` is present but not one of
    ours (:func:`trusted_origin`): a page of another site, or of another port or scheme on
    our host, must not use the browser's session cookie."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        origin = dict(scope.get("headers", [])).get(b"origin")
        if origin is not None and not trusted_origin(origin.decode(errors="replace"), scope):
            await send({"type": "websocket.close", "code": 4403})
            return
        return await self.app(scope, receive, send)


class FailClosed:
    """A WebSocket whose sign-in cannot be checked (the database is unreachable while the
    session or the token is looked up) is refused as the sockets refuse anything they
    cannot check: opened, told why, closed with 4503 so that the client retries with
    back-off. Without this the server answered the handshake with a bare HTTP 500."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        accepted = False

        async def tracking_send(message):
            nonlocal accepted
            accepted = accepted or message["type"] in ("websocket.accept", "websocket.close")
            await send(message)

        try:
            return await self.app(scope, receive, tracking_send)
        except (OperationalError, InterfaceError) as exc:
            if accepted:
                raise
            log.warning("websocket refused: sign-in could not be checked: %s", exc)
            message = await receive()
            if message["type"] != "websocket.connect":
                return None
            await send({"type": "websocket.accept"})
            error = {"type": "error", "code": CLOSE_UNAVAILABLE,
                     "message": "Sign-in could not be checked; retry shortly."}  # fmt: skip
            await send({"type": "websocket.send", "text": json.dumps(error)})
            await send({"type": "websocket.close", "code": CLOSE_UNAVAILABLE})
            return None


def websocket_stack(app):
    """Origin check, then session auth, then token auth (a token wins over a cookie); a
    sign-in that cannot be checked fails closed (:class:`FailClosed`)."""
    return OriginCheck(FailClosed(AuthMiddlewareStack(TokenAuthMiddleware(app))))

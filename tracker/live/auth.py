"""WebSocket authentication and origin checks.

Browsers authenticate with their session cookie and always send ``Origin``,
which must then be one of ours, scheme, host and port (no cross-site WebSocket hijacking). Apps
send ``Authorization: Token <key>`` (every native WebSocket client can set it) and usually
no ``Origin``; a token is not ambient authority, so a missing Origin is fine for them. A
client that cannot set a header (a browser holding a token) opens the socket with a
one-time ticket (``?ticket=``, :mod:`tracker.accounts.services`), never with the key in
the URL: ``?token=`` is refused (4401), as URLs end up in logs.
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

from tracker.accounts.security import (
    checked_user_for_token,
    user_for_token,
    user_for_token_id,
)
from tracker.accounts.services import redeem_socket_ticket
from tracker.live.messages import CLOSE_UNAVAILABLE

log = logging.getLogger(__name__)


#: ("token", key), ("session", session key), or what a ticket stood for: ("token-id",
#: "<token id>:<seal>") or ("session", session key).
Credential = tuple[str, str]


@database_sync_to_async
def _user_for(credential: Credential):
    """At connect, an app's token key may sign in as its user kept through a database
    outage (as a REST read does, :func:`user_for_token`); every later check of the open
    socket reads the database (:func:`current_user`) and fails closed."""
    if credential[0] == "token":
        return user_for_token(credential[1]) or AnonymousUser()
    return current_user(credential) or AnonymousUser()


def credential_of(scope: dict) -> Credential | None:
    """What authenticated this socket, so it can be checked again while it is open."""
    if scope.get("auth_credential"):
        return scope["auth_credential"]
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
    if credential is None or credential[0] == "refused":
        return None
    kind, key = credential
    if kind == "token":  # never a sign-in kept through an outage: a socket fails closed
        return checked_user_for_token(key)
    if kind == "token-id":
        token_id, _, seal = key.partition(":")
        return user_for_token_id(int(token_id), seal)
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
    user = get_user(SimpleNamespace(session=store))  # checks the hash and is_active
    return user if user.is_authenticated else None


class TokenAuthMiddleware:
    """Signs a WebSocket in by API token (``Authorization: Token``) or by a socket ticket
    (``?ticket=``, redeemed here, once). A ``?token=`` signs nothing in: the socket is
    anonymous (4401), whatever cookie came with it, so an app still sending its key in the
    URL learns at once to move it to the header.

    The credential stays in the scope so the consumer can re-check it for the socket's
    whole life (a ticket's: the token or session it stood for)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        credential: Credential | None = None
        auth = headers.get(b"authorization", b"").decode()
        query = parse_qs(scope.get("query_string", b"").decode())
        if auth.lower().startswith("token "):
            credential = ("token", auth[6:].strip())
        elif query.get("ticket"):
            credential = await database_sync_to_async(redeem_socket_ticket)(query["ticket"][0])
            credential = credential or ("refused", "")
        elif query.get("token"):
            credential = ("refused", "")
        if credential is not None:
            user = await _user_for(credential)
            scope = {**scope, "user": user, "auth_credential": credential}
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

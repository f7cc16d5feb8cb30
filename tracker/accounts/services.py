"""Signing in and out of the API, and socket tickets: the only writers of API tokens.

Each sign-in gets a token of its own (:func:`issue_token`), so one app's sign-out
(:func:`sign_out`) leaves the user's other apps signed in; :func:`sign_out_everywhere`
revokes them all. Deleting a token closes the sockets signed in with it within a second
(``tracker.live.signals``).

A socket ticket (:func:`issue_socket_ticket`) lets a browser-based client that holds a
token open a WebSocket without putting the long-lived key in the URL: browsers cannot set
a header on a WebSocket, and URLs end up in logs. It is random, signs one socket in, once,
within ``SOCKET_TICKET_SECONDS``, and stands for the credential it was issued under, so
revoking that credential closes the socket as it would one signed in with the key.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from tracker.accounts.models import ApiToken
from tracker.accounts.security import sealed_key
from tracker.cache.counters import tickets
from tracker.sharing.tokens import digest

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser


@dataclass(frozen=True)
class Issued:
    """A new token and its key: the key is in this answer only."""

    token: ApiToken
    key: str


def issue_token(user: AbstractBaseUser, client: str = "") -> Issued:
    """A new token for one sign-in (``client``: what the app says it is). Beyond
    ``API_TOKENS_PER_USER`` the user's oldest tokens are revoked, expired ones with them."""
    key = sealed_key(user)
    with transaction.atomic():
        token = ApiToken.objects.create(user=user, digest=digest(key), client=client[:100])
        mine = ApiToken.objects.filter(user=user)
        surplus = mine.values_list("pk", flat=True)[settings.API_TOKENS_PER_USER :]
        days = settings.API_TOKEN_TTL_DAYS
        gone = Q(pk__in=list(surplus))
        if days > 0:
            gone |= Q(created__lt=timezone.now() - timedelta(days=days))
        mine.filter(gone).delete()  # row by row: each one's signal closes its sockets
    return Issued(token, key)


def sign_out(token: ApiToken) -> None:
    """Revoke this one token (the app signing out)."""
    ApiToken.objects.filter(pk=token.pk).delete()


def sign_out_everywhere(user: AbstractBaseUser) -> int:
    """Revoke every API token of ``user``: each app signs in again. How many there were."""
    deleted, _ = ApiToken.objects.filter(user=user).delete()
    return deleted


# ---------------------------------------------------------------------- socket tickets

#: Random bytes of a ticket (256 bits, 43 URL-safe characters).
TICKET_BYTES = 32
_TICKET_KEY = "socket-ticket:{}"

#: What a socket signed in with a ticket re-checks for its whole life: ("token-id",
#: "<token id>:<stamp>") or ("session", <session key>), as tracker.live.auth reads it.
Credential = tuple[str, str]


def issue_socket_ticket(user: AbstractBaseUser, token: ApiToken | None, session: str | None) -> str:
    """A ticket for one socket of ``user``, standing for ``token`` (an API token) or, for
    a browser signed in with its session, ``session``. Kept in the ``tickets`` cache (Redis
    in production, files in ``make run``: any web process may redeem it) under its digest,
    with the token's id and a fresh seal of the user's password (:func:`sealed_key`, stored nowhere else and
    opening nothing: no token row has its digest), so a password change revokes it too."""
    if token is not None:
        credential: Credential = ("token-id", f"{token.pk}:{sealed_key(user)}")
    elif session:
        credential = ("session", session)
    else:
        raise ValueError("a socket ticket stands for a token or a session")
    ticket = secrets.token_urlsafe(TICKET_BYTES)
    tickets.set(
        _TICKET_KEY.format(digest(ticket)), credential, timeout=settings.SOCKET_TICKET_SECONDS
    )
    return ticket


def redeem_socket_ticket(ticket: str) -> Credential | None:
    """The credential ``ticket`` stands for, once: the first redeemer deletes it (the
    cache's delete says which caller removed it, so two sockets racing with one ticket
    cannot both win); unknown, used and lapsed tickets are None."""
    if not ticket or len(ticket) > 64:
        return None
    key = _TICKET_KEY.format(digest(ticket))
    credential = tickets.get(key)
    if credential is None or not tickets.delete(key):
        return None
    return tuple(credential)

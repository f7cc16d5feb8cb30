"""Share-link tokens: made here, stored only as their digest.

A token is ``secrets.token_urlsafe(32)``: 256 random bits, 43 URL-safe characters. The
database keeps its SHA-256, so a copy of the table (a backup, a replica, a screen of the
admin) opens no link. A token is found by its digest's index: nothing secret is compared
in Python, and the time a lookup takes says nothing about any stored token (a guess's
digest shares no structure with the token it would have to be).
"""

from __future__ import annotations

import hashlib
import re
import secrets

#: Random bytes per token (256 bits; the issue asks for at least 128).
TOKEN_BYTES = 32
_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def digest(token: str) -> str:
    """The stored form of ``token``: its SHA-256, hexadecimal."""
    return hashlib.sha256(token.encode()).hexdigest()


def well_formed(token: str) -> bool:
    """Whether ``token`` has the shape :func:`new_token` gives (anything else is answered
    like an unknown token, without a query)."""
    return bool(_SHAPE.fullmatch(token))


#: Headers of every answer to a URL that holds a token (the share page, its socket's
#: handshake): the token must not leave in a ``Referer``, stay in a cache, or be indexed.
PRIVATE_HEADERS = {
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
}

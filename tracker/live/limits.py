"""What a client may send a WebSocket: the inbound limits (docs/api.md, "Limits").

* A message is at most ``WS_MAX_MESSAGE_BYTES`` (the largest a client sends is a ping):
  a larger one closes the socket with 1009 before it is parsed. The ASGI server refuses
  larger frames itself (uvicorn's ``--ws-max-size``, set to the same number everywhere),
  so this check covers servers and tests that do not.
* A user holds at most ``WS_MAX_SOCKETS_PER_USER`` open sockets (:class:`SocketSlots`),
  opens at most ``WS_CONNECT_RATE`` (:func:`admit`), and each socket sends at most
  ``WS_PING_RATE`` messages (:class:`MessageRate`); beyond either, 4429 with
  ``retry_after``. Operators are counted like everyone else.
* A shared tracking link's socket has no user: its connects are counted per client
  address (``SHARE_CONNECT_RATE``, before the token is even looked up, so guessing costs
  the guesser's budget), and its open sockets per link (``SHARE_MAX_SOCKETS_PER_LINK``)
  and against the link's creator's ``WS_MAX_SOCKETS_PER_USER`` (:class:`SlotPair`).

The socket count and connect rate live in the cache: Redis in production, shared by every
web process; in embedded mode (no ``REDIS_URL``) each web process counts its own.
"""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from tracker.accounts.rates import parse_rate
from tracker.accounts.security import Refusal, client_ip, spend
from tracker.cache.counters import cache


def message_size(message: dict[str, Any]) -> int:
    """The size in bytes of one ``websocket.receive`` message, without copying an ASCII one."""
    text = message.get("text")
    if text is not None:
        return len(text) if text.isascii() else len(text.encode())
    return len(message.get("bytes") or b"")


class SocketSlots:
    """One owner's open sockets (a user's, or a shared link's), counted across every web
    process.

    Each open socket holds one of ``size`` numbered slots in the cache (default:
    ``WS_MAX_SOCKETS_PER_USER``), as a lease it renews every ``RENEW_SECONDS`` while open
    and gives back when it closes; a slot held by a process that died lapses after
    ``LEASE_SECONDS``.
    """

    LEASE_SECONDS = 90
    RENEW_SECONDS = 30

    def __init__(self, owner: int | str, holder: str, size: int | None = None) -> None:
        self.owner, self.holder = owner, holder
        self.size = settings.WS_MAX_SOCKETS_PER_USER if size is None else size
        self.key: str | None = None

    def _keys(self) -> list[str]:
        return [f"ws-slot:{self.owner}:{n}" for n in range(self.size)]

    def claim(self) -> bool:
        """Take a free slot; False when the user holds them all."""
        for key in self._keys():
            if cache.add(key, self.holder, timeout=self.LEASE_SECONDS):
                self.key = key
                return True
        return False

    def renew(self) -> None:
        if self.key is None:
            return
        if cache.get(self.key) == self.holder:
            cache.touch(self.key, self.LEASE_SECONDS)
        else:  # lapsed (the process stalled past the lease): take it again if still free
            cache.add(self.key, self.holder, timeout=self.LEASE_SECONDS)

    def release(self) -> None:
        if self.key is not None and cache.get(self.key) == self.holder:
            cache.delete(self.key)
        self.key = None


def _admit(user_id: int, slots: SocketSlots) -> Refusal | None:
    wait = spend("ws-connect", str(user_id), parse_rate(settings.WS_CONNECT_RATE))
    if wait is not None:
        return Refusal(wait, f"Too many connects: at most {settings.WS_CONNECT_RATE} per user.")
    if not slots.claim():
        return Refusal(
            slots.LEASE_SECONDS // 3,
            f"Too many open sockets: at most {settings.WS_MAX_SOCKETS_PER_USER} sockets per "
            "user; close one first.",
        )
    return None


def socket_client(scope: dict[str, Any]) -> str:
    """A socket's client address, by the rule of every HTTP limit (:func:`client_ip`)."""
    headers = dict(scope.get("headers") or [])
    meta = {"REMOTE_ADDR": (scope.get("client") or ("",))[0] or ""}
    forwarded = headers.get(b"x-forwarded-for")
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded.decode("latin-1")
    return client_ip(meta)


def _admit_share(client: str) -> Refusal | None:
    wait = spend("share-connect", client, parse_rate(settings.SHARE_CONNECT_RATE))
    if wait is not None:
        return Refusal(
            wait, f"Too many connects: at most {settings.SHARE_CONNECT_RATE} per address."
        )
    return None


class SlotPair:
    """A shared link's socket holds two slots: one of its link's and one of the link's
    creator's (``WS_MAX_SOCKETS_PER_USER``, shared with the creator's own sockets), so the
    links of one customer hold no more sockets than the customer may."""

    LEASE_SECONDS, RENEW_SECONDS = SocketSlots.LEASE_SECONDS, SocketSlots.RENEW_SECONDS

    def __init__(self, link: SocketSlots, creator: SocketSlots) -> None:
        self.link, self.creator = link, creator

    def renew(self) -> None:
        self.link.renew()
        self.creator.renew()

    def release(self) -> None:
        self.link.release()
        self.creator.release()


def _claim_share(slots: SlotPair) -> Refusal | None:
    if not slots.link.claim():
        return Refusal(
            slots.LEASE_SECONDS // 3,
            f"Too many open pages for this link: at most {slots.link.size}; close one first.",
        )
    if not slots.creator.claim():
        slots.link.release()
        return Refusal(
            slots.LEASE_SECONDS // 3,
            "Too many open pages for this order's links: their creator's sockets "
            f"(at most {slots.creator.size}) are all open; close one first.",
        )
    return None


#: Count one connect of a user, then take a socket slot: a Refusal when either is spent
#: (in a worker thread: the cache may be a network round trip away).
admit = sync_to_async(_admit, thread_sensitive=False)
#: A shared link's socket: count one connect of its client address (before the token is
#: looked up), and later take one of its link's slots.
admit_share = sync_to_async(_admit_share, thread_sensitive=False)
claim_share = sync_to_async(_claim_share, thread_sensitive=False)
renew = sync_to_async(lambda slots: slots.renew(), thread_sensitive=False)
release = sync_to_async(lambda slots: slots.release(), thread_sensitive=False)


class MessageRate:
    """One socket's budget of client messages (``WS_PING_RATE``), a fixed window in memory."""

    def __init__(self) -> None:
        self.limit, self.period = parse_rate(settings.WS_PING_RATE)
        self.window, self.count = 0, 0

    def hit(self) -> int | None:
        """Count one message: None while the budget lasts, else seconds until it renews."""
        now = int(time.monotonic())
        if now // self.period != self.window:
            self.window, self.count = now // self.period, 0
        self.count += 1
        if self.count > self.limit:
            return self.period - now % self.period or 1
        return None

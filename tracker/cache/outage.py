"""What a web process keeps so that tracking reads answer through a database outage.

A tracking read's changing parts come from Pinot, but who a token signs in as, whom an
order belongs to and who may see it come from the database, on every read: with
PostgreSQL down every read was a 503 (the fault drill, issue 69). Each such answer the
database gave is kept here, per process, and used only when the database cannot be
reached:

* a sign-in: a token's user (its key's SHA-256 only, never the key), as a detached user
  with the fields the checks read (:func:`keep_sign_in`, :func:`signed_in`);
* an access answer: a policy question's answer for one user, such as "may see order 7"
  or "their list's scope" (:func:`answer`).

An answer is used for at most :data:`OUTAGE_SECONDS` past the last time this process's
notice listener read the notices (:mod:`tracker.notices.listener`): that read is the
outage's start as far as this process can know it (the listener reads every 0.2 s), and
every revocation committed before it has been heard (a process whose listener never
ran, having read no order's detail nor opened a socket, uses nothing). Only an answer
checked within
:data:`KEEP_SECONDS` before that read is used, and none once the database answers again
(the listener's resync drops them all: notices may have aged out unread meanwhile).

Every revocation drops what it touches: the notices ``access.user`` (a password change,
a token deleted, deactivation, a profile moved, staff removed, an order given to a
courier) and ``access.order`` (an order's customer or courier replaced, a shared link
revoked), at once in the process that made the change (:mod:`tracker.live.signals`) and
through the listener in every other one. A read that was under way when a drop came
keeps nothing (the drop's generation, as :mod:`tracker.cache.reads` does).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from cachetools import LRUCache
from django.contrib.auth import get_user_model
from django.db import InterfaceError, OperationalError

from tracker.cache.maps import LOCK, bounded
from tracker.notices import listener
from tracker.sharing.tokens import digest  # what a token is kept under: never the key

T = TypeVar("T")

#: What a database that cannot be reached raises (refused, reset, gone mid-query).
DATABASE_UNREACHABLE = (OperationalError, InterfaceError)
#: Answers are kept for users and orders read this long before the outage.
KEEP_SECONDS = 600.0
#: ... and used at most this long past its start.
OUTAGE_SECONDS = 60.0
#: The notice topics that drop answers (written by :mod:`tracker.live.signals`).
USER_TOPIC, ORDER_TOPIC = "access.user", "access.order"
#: Users whose answers a process keeps (each a few hundred bytes), and token digests.
USERS = 20_000

#: The user fields a kept sign-in restores: what the policy and the channels read of it.
USER_FIELDS = ("id", "username", "first_name", "last_name", "is_staff", "is_superuser")


@dataclass(frozen=True, slots=True)
class Kept:
    value: Any
    checked_at: float  # time.monotonic() of the database's answer
    orders: frozenset[int]  # the orders the answer is about (an order's notice drops it)


_users: LRUCache = bounded(USERS)  # user id -> {question: Kept}
_tokens: LRUCache = bounded(USERS)  # SHA-256 of a token key -> user id
_generation = itertools.count()
_current = next(_generation)
#: time.monotonic() of the notice listener's last good read in this process.
_heard_at = 0.0


def _heard(until: float) -> None:
    global _heard_at
    _heard_at = until - listener.STALE_SECONDS


def riding() -> bool:
    """Whether what this process keeps may still answer, the database being unreachable:
    the listener read the notices at most :data:`OUTAGE_SECONDS` ago."""
    return time.monotonic() - _heard_at <= OUTAGE_SECONDS


def _usable(kept: Kept | None) -> bool:
    """Whether ``kept`` may answer now, the database being unreachable."""
    return kept is not None and riding() and kept.checked_at >= _heard_at - KEEP_SECONDS


def _keep(user_id: int, question: Hashable, value: Any, orders: frozenset[int], since: int):
    """Keep an answer read at generation ``since``, unless a drop came meanwhile."""
    kept = Kept(value, time.monotonic(), orders)
    with LOCK:
        if since == _current:
            answers = _users.get(user_id)
            if answers is None:
                answers = _users[user_id] = {}
            answers[question] = kept


def _kept(user_id: int, question: Hashable) -> Kept | None:
    with LOCK:
        return (_users.get(user_id) or {}).get(question)


def answer(
    user_id: int | None,
    question: Hashable,
    read: Callable[[], T],
    about: Callable[[T], Iterable[int]] = lambda _: (),
) -> T:
    """``read()``, the policy's answer to ``question`` for ``user_id``, kept (``about``:
    the orders it names, whose notices drop it); when the database cannot be reached,
    the answer kept lately, or the error."""
    if user_id is None:
        return read()
    since = _current
    try:
        value = read()
    except DATABASE_UNREACHABLE:
        kept = _kept(user_id, question)
        if not _usable(kept):
            raise
        return kept.value
    _keep(user_id, question, value, frozenset(about(value)), since)
    return value


def generation() -> int:
    """Taken before a read whose answer is then kept: a drop since refuses to keep it."""
    return _current


def keep_sign_in(key: str, user: Any, since: int) -> None:
    """``key`` signs in as ``user`` (an active user, checked in the database after
    :func:`generation` was ``since``)."""
    fields = {name: getattr(user, name) for name in USER_FIELDS}
    _keep(user.pk, ("sign-in", digest(key)), fields, frozenset(), since)
    with LOCK:
        if since == _current:
            _tokens[digest(key)] = user.pk


def signed_in(key: str) -> Any | None:
    """The user ``key`` signed in as lately, detached (saving it is refused), when the
    database cannot be reached (call it only then); None when nothing usable is kept."""
    token = digest(key)
    with LOCK:
        user_id = _tokens.get(token)
    kept = None if user_id is None else _kept(user_id, ("sign-in", token))
    if not _usable(kept):
        return None
    user = get_user_model()(**kept.value, is_active=True)
    user._state.adding, user._state.db = False, "default"
    user.save = user.delete = _read_only
    return user


def _read_only(*args: Any, **kwargs: Any) -> None:
    raise OperationalError("a user kept through a database outage is not saved")


def sign_in(key: str, check: Callable[[str], Any]) -> Any | None:
    """``check(key)``'s user (None: the key signs nobody in), kept; through an outage,
    the user it signed in as lately (:func:`signed_in`), or the error."""
    since = _current
    try:
        user = check(key)
    except DATABASE_UNREACHABLE:
        kept = signed_in(key)
        if kept is None:
            raise
        return kept
    if user is None:
        drop_token(key)
    else:
        keep_sign_in(key, user, since)
    return user


def _new_generation() -> None:
    global _current
    _current = next(_generation)


def drop_token(key: str) -> None:
    """A key that no longer signs in (expired): nothing read before can race with it, so
    no new generation (a stream of bad keys must not keep every read from keeping)."""
    with LOCK:
        _tokens.pop(digest(key), None)


def drop_user(user_id: int) -> None:
    """Everything kept for ``user_id``: their sign-ins and every answer about them."""
    with LOCK:
        _new_generation()
        _users.pop(user_id, None)


def drop_order(order_id: int) -> None:
    """Every answer about ``order_id`` (who may see it, a courier's list holding it)."""
    with LOCK:
        _new_generation()
        for answers in list(_users.values()):
            for question in [q for q, kept in answers.items() if order_id in kept.orders]:
                del answers[question]


def drop_all() -> None:
    with LOCK:
        _new_generation()
        _users.clear()
        _tokens.clear()


def connect() -> None:
    """Drop on every access notice, and everything when notices may have been missed;
    hear each good read of the listener. Called once, from the app's ``ready()``."""
    listener.subscribe(USER_TOPIC, drop_user)
    listener.subscribe(ORDER_TOPIC, drop_order)
    listener.on_resync(drop_all)
    listener.on_read(_heard)


def clear() -> None:
    """Drop everything and forget the listener's reads (tests)."""
    global _heard_at
    drop_all()
    _heard_at = 0.0

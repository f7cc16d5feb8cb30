"""Reading notices: one thread per process that keeps state others may change.

The thread starts the first time something in the process asks for it
(:func:`ensure_started`, which :func:`healthy` calls), reads the notices of the last ``LOOKBACK_SECONDS`` every
``POLL_SECONDS`` and hands each new one to the handler of its topic. A notice is
known by its id and time, so ids that commit out of order (PostgreSQL sequences)
are not skipped. Whoever keeps copies asks :func:`healthy` before trusting one:
while the thread cannot read (database down), nothing tells it what changed, so
copies are not used; when it can read again, ``on_resync`` handlers drop them all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import close_old_connections, connection
from django.utils import timezone

log = logging.getLogger(__name__)

#: How often the notices are read: the longest a change waits before a process acts.
POLL_SECONDS = 0.2
#: How far back each read looks: a notice is written when its change commits, so
#: this covers a listener that was a few seconds late (a busy machine, clock steps).
LOOKBACK_SECONDS = 15.0
#: A listener whose last good read is older than this is not trusted (see healthy()).
STALE_SECONDS = 2.0

Handler = Callable[[int], None]

_handlers: dict[str, list[Handler]] = {}
_resync: list[Callable[[], None]] = []
_on_read: list[Callable[[float], None]] = []
_lock = threading.Lock()
_thread: threading.Thread | None = None
_stop = threading.Event()
_read_at = 0.0  # time.monotonic() of the last good read


def subscribe(topic: str, handler: Handler) -> None:
    """Call ``handler(key)`` (on the listener's thread; keep it short) for each notice."""
    with _lock:
        _handlers.setdefault(topic, []).append(handler)


def on_resync(handler: Callable[[], None]) -> None:
    """Call ``handler()`` whenever notices may have been missed (start, a failed read)."""
    with _lock:
        _resync.append(handler)


def on_read(handler: Callable[[float], None]) -> None:
    """Call ``handler(until)`` after each good read: the caller may trust what it keeps
    until ``until`` (monotonic), :data:`STALE_SECONDS` later, unless told again."""
    with _lock:
        _on_read.append(handler)


def ensure_started() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return  # every request asks: no lock on the way through
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _stop.clear()
        _thread = threading.Thread(target=_run, name="notice-listener", daemon=True)
        _thread.start()


def healthy() -> bool:
    """True while the listener runs and has read the notices within STALE_SECONDS. Starts
    it the first time: whoever asks is about to rely on it."""
    ensure_started()
    alive = _thread is not None and _thread.is_alive()
    return alive and time.monotonic() - _read_at < STALE_SECONDS


def stop() -> None:
    """Stop the thread (tests: it holds a database connection of its own)."""
    global _thread, _read_at
    with _lock:
        thread, _thread = _thread, None
    if thread is not None:
        _stop.set()
        thread.join(10)
    _read_at = 0.0


def _read(since: datetime) -> list[tuple[int, datetime, str, int]]:
    from tracker.notices.models import Notice

    close_old_connections()  # as around a request: honours CONN_MAX_AGE, drops broken ones
    rows = Notice.objects.filter(created_at__gte=since).order_by("id")
    return list(rows.values_list("id", "created_at", "topic", "key"))


def _dispatch(topic: str, key: int) -> None:
    for handler in _handlers.get(topic, ()):
        try:
            handler(key)
        except Exception:  # noqa: BLE001 - one handler must not starve the others
            log.exception("notice handler for %s %s failed", topic, key)


def _run() -> None:
    global _read_at
    seen: dict[tuple[int, datetime], datetime] = {}
    in_sync = False
    try:
        while not _stop.is_set():
            now = timezone.now()
            try:
                rows = _read(now - timedelta(seconds=LOOKBACK_SECONDS))
            except Exception:  # noqa: BLE001 - keep trying; copies are not trusted meanwhile
                if in_sync:
                    log.warning(
                        "cannot read notices; kept copies unused until it can", exc_info=True
                    )
                in_sync = False
                _stop.wait(POLL_SECONDS)
                continue
            if in_sync and time.monotonic() - _read_at > LOOKBACK_SECONDS - 1:
                in_sync = False  # a starved thread: notices may have aged out unread
            if not in_sync:
                for handler in list(_resync):
                    handler()
                in_sync = True
            for notice_id, created_at, topic, key in rows:
                if (notice_id, created_at) not in seen:
                    seen[(notice_id, created_at)] = created_at
                    _dispatch(topic, key)
            horizon = now - timedelta(seconds=2 * LOOKBACK_SECONDS)
            for old in [k for k, at in seen.items() if at < horizon]:
                del seen[old]
            _read_at = time.monotonic()
            for handler in list(_on_read):
                handler(_read_at + STALE_SECONDS)
            _stop.wait(POLL_SECONDS)
    finally:
        connection.close()

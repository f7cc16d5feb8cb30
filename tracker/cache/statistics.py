"""The arrival prediction's statistics, cached per process and shared through Redis.

One process-wide entry holds them: the first read loads them (five queries and
two for the trails), later reads never wait; a read after ``ETA_REFRESH_SECONDS`` starts
a refresh in the background. When Pinot cannot answer, the defaults stand in (the basis
says so) and the load is retried later.

Every process loads the statistics of the same window (as of its start), so the processes
share them through the ``default`` cache: Redis in production, where one web worker of
all the replicas runs the queries each window (the one that claims it) and the others read
its result; the others keep what they had and look again :data:`RETRY_SECONDS` later. In
``make run`` that cache is each process's own, and each worker loads its own. A cache that
cannot be reached only means each process loads for itself.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from cachetools import LRUCache
from django.core.cache import caches

from contract.events import now_ms
from runtime.conf import env_float
from tracker.cache.maps import bounded
from tracker.tracking import selectors
from tracker.tracking.eta.stats import Statistics, load_statistics
from tracker.tracking.exceptions import TrackingUnavailable

log = logging.getLogger(__name__)


def refresh_seconds() -> float:
    return env_float("ETA_REFRESH_SECONDS", 300.0)


_lock = threading.Lock()
#: Broker URL -> (statistics, monotonic time loaded); the URLs whose refresh is running.
_cache: LRUCache = bounded(8)
_refreshing: set[str] = set()
#: The statistics last loaded and until when (monotonic) they need no refresh: what every
#: read asks for, answered without reading the settings (the broker's URL, the window).
_fresh: tuple[Statistics, float] | None = None
#: A failed load is retried after this many seconds (the defaults stand in meanwhile), and
#: a process whose window another process claimed looks for that one's result as often.
RETRY_SECONDS = 15.0
#: The shared entries' keys: a window's statistics, and who loads them. The version changes
#: with :class:`Statistics`, so processes of two releases never read each other's.
SHARED_KEY = "eta-statistics:v1:{}:{}"
CLAIM_KEY = "eta-statistics-claim:v1:{}:{}"
#: A claim lapses after this long, so a process that died loading does not block the rest.
CLAIM_SECONDS = 120


def _load(key: str, *, shared: bool = True) -> Statistics:
    """Statistics as of the start of the current refresh window: every process then
    predicts from the same numbers, so one order reads the same whichever worker answers
    (and its ETag holds), and all move on at the window's end. With ``shared``, another
    process's entry of this window is taken, or this process claims the window and loads
    it, or (claimed by another) keeps what it had and looks again soon."""
    step_ms = int(refresh_seconds() * 1000)
    now = now_ms()
    window = now - now % step_ms
    due = time.monotonic() - (now - window) / 1000  # when this window began, monotonic
    stats = _shared_entry(key, window) if shared else None
    loaded = due
    if stats is None and shared and not _claim(key, window):
        stats = _cache.get(key, (Statistics(), 0.0))[0]
        loaded = time.monotonic() - refresh_seconds() + RETRY_SECONDS
    elif stats is None:
        try:
            stats = load_statistics(as_of_ms=window)
        except TrackingUnavailable as exc:
            log.warning("ETA statistics not loaded (defaults meanwhile): %s", exc)
            stats = _cache.get(key, (Statistics(), 0.0))[0]
            loaded = time.monotonic() - refresh_seconds() + RETRY_SECONDS
            _unclaim(key, window)  # whichever process looks next loads it
        else:
            _share(key, window, stats)
    global _fresh
    with _lock:
        _cache[key] = (stats, loaded)
        _fresh = (stats, loaded + refresh_seconds())
        _refreshing.discard(key)
    return stats


def _shared_entry(key: str, window: int) -> Statistics | None:
    try:
        found = caches["default"].get(SHARED_KEY.format(key, window))
    except Exception:  # noqa: BLE001 - nothing shared: this process loads its own
        return None
    return found if isinstance(found, Statistics) else None


def _claim(key: str, window: int) -> bool:
    """Whether this process loads ``window`` (none claimed it, or the cache is away)."""
    try:
        return caches["default"].add(CLAIM_KEY.format(key, window), 1, CLAIM_SECONDS)
    except Exception:  # noqa: BLE001 - unshared: load
        return True


def _unclaim(key: str, window: int) -> None:
    with contextlib.suppress(Exception):  # else the claim lapses by itself
        caches["default"].delete(CLAIM_KEY.format(key, window))


def _share(key: str, window: int, stats: Statistics) -> None:
    try:
        caches["default"].set(SHARED_KEY.format(key, window), stats, 2 * refresh_seconds())
    except Exception:  # noqa: BLE001 - the others load their own
        log.warning("ETA statistics not shared (each process loads its own)", exc_info=True)


def current_statistics() -> Statistics:
    """The cached statistics of this process's Pinot; loads them on first use, and starts
    a background refresh when they are older than ``ETA_REFRESH_SECONDS``."""
    fresh = _fresh
    if fresh is not None and time.monotonic() <= fresh[1]:
        return fresh[0]
    key = selectors.broker_url()
    with _lock:
        cached = _cache.get(key)
        stale = cached is None or time.monotonic() - cached[1] > refresh_seconds()
        start = stale and key not in _refreshing
        if start:
            _refreshing.add(key)
    if cached is None:
        return _load(key) if start else Statistics()
    if start:
        threading.Thread(target=_load, args=(key,), name="eta-refresh", daemon=True).start()
    return cached[0]


def refresh() -> Statistics:
    """Load the statistics now, from Pinot, and share them (tests, and a process that
    wants them warm at start)."""
    key = selectors.broker_url()
    with _lock:
        _refreshing.add(key)
    return _load(key, shared=False)

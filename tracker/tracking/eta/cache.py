"""One process-wide cache holds the prediction's statistics: the first read loads them (five queries and
two for the trails), later reads never wait; a read after ``ETA_REFRESH_SECONDS`` starts
a refresh in the background. When Pinot cannot answer, the defaults stand in (the basis
says so) and the load is retried later.
"""

from __future__ import annotations

import logging
import threading
import time

from contract.events import now_ms
from runtime.conf import env_float
from tracker.tracking import selectors
from tracker.tracking.eta.stats import Statistics, load_statistics
from tracker.tracking.exceptions import TrackingUnavailable

log = logging.getLogger(__name__)


def refresh_seconds() -> float:
    return env_float("ETA_REFRESH_SECONDS", 300.0)


_lock = threading.Lock()
#: Broker URL -> (statistics, monotonic time loaded); the URLs whose refresh is running.
_cache: dict[str, tuple[Statistics, float]] = {}
_refreshing: set[str] = set()
#: A failed load is retried after this many seconds (the defaults stand in meanwhile).
RETRY_SECONDS = 15.0


def _load(key: str) -> Statistics:
    """Statistics as of the start of the current refresh window: every process (each web
    worker keeps its own) then predicts from the same numbers, so one order reads the same
    whichever worker answers (and its ETag holds), and all move on at the window's end."""
    step_ms = int(refresh_seconds() * 1000)
    now = now_ms()
    window = now - now % step_ms
    try:
        stats = load_statistics(as_of_ms=window)
        loaded = time.monotonic() - (now - window) / 1000
    except TrackingUnavailable as exc:
        log.warning("ETA statistics not loaded (defaults meanwhile): %s", exc)
        stats = _cache.get(key, (Statistics(), 0.0))[0]
        loaded = time.monotonic() - refresh_seconds() + RETRY_SECONDS
    with _lock:
        _cache[key] = (stats, loaded)
        _refreshing.discard(key)
    return stats


def current_statistics() -> Statistics:
    """The cached statistics of this process's Pinot; loads them on first use, and starts
    a background refresh when they are older than ``ETA_REFRESH_SECONDS``."""
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
    """Load the statistics now (tests, and a process that wants them warm at start)."""
    key = selectors.broker_url()
    with _lock:
        _refreshing.add(key)
    return _load(key)

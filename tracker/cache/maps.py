"""The one bounded map: cachetools' least-recently-used cache, for every in-process use
(and its expiring form, for what is true only for a while).

Callers on several threads (a web process's request threads) hold :data:`LOCK` around
each operation: cachetools' maps are not thread-safe. Single-threaded callers (the push
bridge under its own lock, a socket's event loop) use the map as a dict.
"""

from __future__ import annotations

import threading

from cachetools import LRUCache, TTLCache

#: Held for each operation on a map shared by threads; never around I/O.
LOCK = threading.RLock()


def bounded(size: int) -> LRUCache:
    """A map of at most ``size`` entries; the least recently used goes first."""
    return LRUCache(maxsize=size)


def expiring(size: int, seconds: float) -> TTLCache:
    """A bounded map whose entries also expire ``seconds`` after they were set."""
    return TTLCache(maxsize=size, ttl=seconds)

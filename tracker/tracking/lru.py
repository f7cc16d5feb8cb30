"""A small thread-safe least-recently-used map, for per-process copies of read data."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` entries; the least recently read goes first. Web servers serve
    requests on several threads, hence the lock (held only for the dict operations)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def drop_where(self, doomed: Callable[[K, V], bool]) -> None:
        """Drop every entry for which ``doomed(key, value)`` is true (a scan: for rare
        events such as an admin edit)."""
        with self._lock:
            for key in [k for k, v in self._items.items() if doomed(k, v)]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

"""Rendered response bodies, by what they were built from.

A body is cached under its content validator (:attr:`tracker.tracking.read_model.
DetailSource.content`), which names everything the body depends on: an equal key is an
equal body, so a cached one is never stale, and an unchanged order's full 200 skips
building, rendering and ``json.dumps`` (0.9 ms for a detail with a 20-point trail, 3 ms
with 200 points, measured in process). Bodies are shared by every request: never
changed after rendering.
"""

from __future__ import annotations

from typing import Any

from tracker.cache.maps import LOCK, bounded

#: Bodies a process caches: a few KB each, up to about 50 KB with a long trail.
BODIES = 2_000

_bodies = bounded(BODIES)


def get(key: str) -> Any:
    """The body cached under ``key``, or None."""
    with LOCK:
        return _bodies.get(key)


def put(key: str, body: Any) -> None:
    with LOCK:
        _bodies[key] = body


def clear() -> None:
    with LOCK:
        _bodies.clear()

"""Whether this process reaches its database and its cache: one round trip each, shared by
``/healthz``, ``/readyz`` and the pipeline monitor's ``ordertrack_dependency_up``."""

from __future__ import annotations

from django.db import connection

from tracker.cache.counters import cache


def database_check() -> str:
    """``ok``, or the error's class name."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - report any failure, never raise
        return f"error: {exc.__class__.__name__}"


def cache_check() -> str:
    """``ok`` when the cache (Redis, where the channel layer lives too, when configured)
    keeps a value for a moment; otherwise what went wrong."""
    try:
        cache.set("healthz", "1", 5)
        return "ok" if cache.get("healthz") == "1" else "error: no round trip"
    except Exception as exc:  # noqa: BLE001 - unreachable, timed out, refused
        return f"error: {exc.__class__.__name__}"


def dependency_checks() -> dict[str, str]:
    """What ``/healthz`` answers for: the database and the cache."""
    return {"database": database_check(), "cache": cache_check()}

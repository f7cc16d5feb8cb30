"""Liveness/readiness for load balancers and orchestrators."""

from __future__ import annotations

from django.core.cache import cache
from django.db import connection
from django.http import JsonResponse


def healthz(request):
    """200 when the database (and the cache, if configured) answer; 503 otherwise.

    Deliberately excludes Kafka and Pinot: the API keeps accepting orders without
    them (outbox) and answers tracking reads with a clear 503, so a broker outage
    must not take every web server out of the load balancer.
    """
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - report any failure, never raise
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        cache.set("healthz", "1", 5)
        checks["cache"] = "ok" if cache.get("healthz") == "1" else "error: no round trip"
    except Exception as exc:  # noqa: BLE001
        checks["cache"] = f"error: {exc.__class__.__name__}"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unhealthy", "checks": checks},
        status=200 if healthy else 503,
    )

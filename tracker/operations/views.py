"""Liveness/readiness for load balancers and orchestrators, and the web's ``/metrics``."""

from __future__ import annotations

import glob
import os
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from runtime.metrics import multiprocess_mode
from tracker.accounts.security import user_for_token
from tracker.operations.checks import dependency_checks
from tracker.operations.pipeline import monitor
from tracker.operations.stages import STALLED
from tracker.orders import policy


def healthz(request):
    """200 when the database (and the cache, if configured) answer; 503 otherwise.

    Deliberately excludes Kafka and Pinot: the API keeps accepting orders without
    them (outbox) and answers tracking reads with a clear 503, so a broker outage
    must not take every web server out of the load balancer (``/readyz`` reports them).
    """
    checks = dependency_checks()
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unhealthy", "checks": checks},
        status=200 if healthy else 503,
    )


def readyz(request):
    """``/healthz`` plus the pipeline: 503 while a stage is stalled. For monitors and
    orchestrators that should know the live path is stuck; the proxy's health check
    stays ``/healthz`` so a stalled stream job does not stop order taking.

    Anyone gets the status and its code; operators (session or API token) also get the
    checks and every stage's status, lag, rate and error (:mod:`tracker.operations.pipeline`),
    which are theirs only, as ``GET /api/v1/operations/pipeline/`` is."""
    checks = dependency_checks()
    pipeline = monitor().snapshot()
    healthy = all(value == "ok" for value in checks.values())
    status = "unhealthy" if not healthy else pipeline["status"]
    body = {"status": status}
    if policy.is_operator(_caller(request)):
        body.update(checks=checks, pipeline=pipeline)
    return JsonResponse(body, status=200 if healthy and pipeline["status"] != STALLED else 503)


def web_registry() -> CollectorRegistry:
    """What this web server exports: every worker process's figures (multi-process mode,
    which ``config.asgi`` turns on for uvicorn's workers). Starts the pipeline monitor,
    whose thread samples the pipeline figures."""
    monitor()
    if not multiprocess_mode():
        return REGISTRY
    registry = CollectorRegistry()
    WorkersCollector(registry)
    return registry


class WorkersCollector(MultiProcessCollector):
    """The workers' metric files, but those still empty: a worker creates a file before it
    sizes it, and prometheus-client fails the whole scrape on one it reads then (a 500
    from ``/metrics``, seen in test_pipeline_health; client_python issue 1199). An empty
    file holds no value yet, so leaving it out loses nothing."""

    def collect(self) -> Any:
        files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if _holds_values(f)]
        return self.merge(files, accumulate=True)


def _holds_values(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:  # a dead worker's live gauge, removed since the glob
        return False


def _caller(request: HttpRequest) -> Any:
    """The signed-in user: the session's, or an API token's (``Authorization: Token``), as
    the API would take it; anonymous otherwise."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "token" and key.strip():
        return user_for_token(key.strip()) or AnonymousUser()
    return request.user


def metrics(request):
    """Prometheus exposition of this web server (:func:`web_registry`). Not routed by the
    production proxy; there Prometheus scrapes each replica's internal listener
    (``WEB_METRICS_PORT``, :mod:`config.metrics_listener`)."""
    registry = web_registry()
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

"""The web's ``/metrics`` on an internal listener, for Prometheus (``WEB_METRICS_PORT``).

Prometheus scrapes each web replica by its container address, over plain HTTP. Django's
public port cannot answer that with debug off (the address is not an allowed host, and
HTTPS redirection would follow), so, like every other process, the web serves its metrics
on a port of its own that only the internal network reaches: compose's proxy forwards the
public port alone. Every worker of one server listens on the port (``SO_REUSEPORT``) and
answers with the figures of them all (prometheus-client's multi-process mode), so a
restarted worker never leaves the port unserved. 0 (the default, ``make run``) = off: the
public ``/metrics`` serves them.
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from runtime.metrics import metrics_host
from tracker.operations.views import web_registry

log = logging.getLogger(__name__)


class _SharedPortServer(ThreadingWSGIServer):
    allow_reuse_port = True  # every worker of the server listens on the one port


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass  # one line per scrape would drown the log


def serve_web_metrics(port: int | None = None) -> ThreadingWSGIServer | None:
    """Serve this server's metrics on ``port`` (default ``WEB_METRICS_PORT``) at
    ``METRICS_HOST``, in a daemon thread; None when off or the port cannot be had
    (logged: the web goes on without it)."""
    port = settings.WEB_METRICS_PORT if port is None else port
    if port <= 0:
        return None
    app = make_wsgi_app(web_registry())
    try:
        server = make_server(
            metrics_host(), port, app, _SharedPortServer, handler_class=_QuietHandler
        )
    except OSError as exc:
        log.warning("web: no metrics listener on %s:%d (%s)", metrics_host(), port, exc)
        return None
    threading.Thread(target=server.serve_forever, name="web-metrics", daemon=True).start()
    log.info("web: metrics on http://%s:%d/metrics", metrics_host(), port)
    return server

"""ASGI entry point: HTTP through Django, WebSockets through Channels.

Garbage collection is tuned for a server that holds thousands of open sockets: each
socket keeps a few hundred objects alive, and CPython's full collection walks every
tracked object, so with thousands of sockets each full collection pauses every socket
at once (docs/performance.md, "5,000 sockets"). The code and
settings loaded at start are frozen out of collection, and the young generation is
collected every 50,000 allocations instead of 700, so objects in flight (pushed
updates waiting for their socket) die young instead of being promoted into the
generation whose growth triggers the full collections.
"""

import atexit
import gc
import os
import threading

from runtime.conf import var_dir
from runtime.metrics import multiprocess_mode, use_multiprocess_dir

# Before anything imports prometheus_client: the workers of one server (siblings, one
# parent) share a directory, so /metrics in any of them reports them all.
use_multiprocess_dir(var_dir() / "metrics" / f"web-{os.getppid()}")

from prometheus_client import multiprocess  # noqa: E402

from config.asgi_threads import get_asgi_application  # noqa: E402

if multiprocess_mode():  # not when another process (a test run) imported the client first
    atexit.register(multiprocess.mark_process_dead, os.getpid())  # its live gauges go with it

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from config.asgi_limits import AnonymousPathLimit, BodySizeLimit  # noqa: E402
from config.lifespan import lifespan  # noqa: E402
from config.metrics_listener import serve_web_metrics  # noqa: E402
from tracker.live.auth import websocket_stack  # noqa: E402
from tracker.live.routing import websocket_urlpatterns  # noqa: E402
from tracker.tracking import eta  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": AnonymousPathLimit(BodySizeLimit(django_asgi_app)),
        "websocket": websocket_stack(URLRouter(websocket_urlpatterns)),
        "lifespan": lifespan,
    }
)

# The arrival statistics' first load is the heaviest work the tracking store gets (seven
# aggregate queries, new query shapes for it to translate). Started by the first requests
# after a restart, it would hold every query queued behind it past its timeout (503s);
# loaded now, those requests find it running and answer with the defaults meanwhile.
threading.Thread(target=eta.current_statistics, name="eta-first-load", daemon=True).start()
serve_web_metrics()  # for Prometheus, off the public port (WEB_METRICS_PORT)

gc.collect()
gc.freeze()
gc.set_threshold(50_000, 20, 20)

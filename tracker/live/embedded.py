"""The push bridge inside the ASGI process (``PUSH_BRIDGE_EMBEDDED``): one per process,
publishing to the in-memory channel layer on the server's event loop.

Production runs it as its own worker instead (``manage.py pushbridge``, through Redis).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any

from channels.layers import InMemoryChannelLayer

from contract.events import Topic, topic_name
from tracker.live.bridge import Bridge, send_in_order
from tracker.live.reader import run_readers

log = logging.getLogger(__name__)

_embedded_lock = threading.Lock()
_embedded: tuple[tuple[Any, str], threading.Thread, threading.Event, threading.Event] | None = None


def ensure_embedded_bridge(loop: asyncio.AbstractEventLoop, channel_layer: Any) -> threading.Event:
    """Run the in-process bridge, publishing on ``loop`` (the ASGI server's event loop).

    One per process; started again if the loop or the topic changed (a restarted
    server loop, or tests that give each case its own topic prefix). Returns the event set
    once every record produced from then on will be published.
    """
    global _embedded
    key = (loop, topic_name(Topic.ORDERS_ENRICHED))
    with _embedded_lock:
        if _embedded is not None:
            running_key, thread, stop, ready = _embedded
            if running_key == key and thread.is_alive():
                return ready
            stop.set()

        def publish(sends: list[tuple[str, dict[str, Any]]]) -> None:
            if loop.is_closed():
                return
            sent = asyncio.run_coroutine_threadsafe(send_in_order(channel_layer, sends), loop)
            # Wait for the whole batch, however long a busy loop takes: a next batch sent
            # beside it could overtake it (a socket then drops the older version as stale).
            while True:
                try:
                    sent.result(timeout=5)
                    return
                except concurrent.futures.TimeoutError:
                    if loop.is_closed():
                        return
                    log.warning("push bridge: %d pushes waiting on a busy loop", len(sends))
                except Exception:  # noqa: BLE001 - a failed push must not stop the bridge
                    log.exception("push bridge: %d pushes failed", len(sends))
                    return

        stop, ready = threading.Event(), threading.Event()
        listening = None
        if isinstance(channel_layer, InMemoryChannelLayer):  # its groups say who listens
            groups = channel_layer.groups
            listening = lambda group: bool(groups.get(group))  # noqa: E731
        thread = threading.Thread(
            target=run_readers,
            args=(Bridge(publish, listening), stop, ready),
            name="push-bridge",
            daemon=True,
        )
        thread.start()
        _embedded = (key, thread, stop, ready)
        return ready


def stop_embedded_bridge(timeout: float = 5.0) -> None:
    """Stop the in-process bridge (server shutdown, end of a test session)."""
    global _embedded
    with _embedded_lock:
        if _embedded is None:
            return
        _, thread, stop, _ = _embedded
        stop.set()
        _embedded = None
    thread.join(timeout)

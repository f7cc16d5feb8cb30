"""The ASGI lifespan of a web process: what starts and stops with the server.

With ``PUSH_BRIDGE_EMBEDDED`` (``make run``) each web process runs its own push bridge.
It starts with the server rather than with the first WebSocket: besides pushing, it
registers each order's newest version, which REST reads consult to skip Pinot for orders
that have not changed (:mod:`tracker.tracking.versions`), and an app that only polls
REST never opens a socket. The server accepts no connection before the bridge follows
the topics, so a record produced after a socket's snapshot reaches that socket. Tests run
the same lifespan around their in-process applications (tests/lifespan.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from tracker.live.embedded import ensure_embedded_bridge, stop_embedded_bridge
from tracker.operations.pipeline import stop_monitor

log = logging.getLogger(__name__)

#: How long start-up waits for the bridge to follow the topics (Kafka may still be starting).
BRIDGE_READY_SECONDS = 15.0


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Start the embedded push bridge with the server; stop it, and the pipeline monitor
    if a request started one, with the server."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if settings.PUSH_BRIDGE_EMBEDDED:
                ready = ensure_embedded_bridge(asyncio.get_running_loop(), get_channel_layer())
                if not await asyncio.to_thread(ready.wait, BRIDGE_READY_SECONDS):
                    log.warning(
                        "push bridge: not following Kafka after %.0f s; serving anyway "
                        "(sockets get pushes once it does)",
                        BRIDGE_READY_SECONDS,
                    )
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(stop_embedded_bridge)
            stop_monitor()
            await send({"type": "lifespan.shutdown.complete"})
            return

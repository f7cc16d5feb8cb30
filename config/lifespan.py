"""The ASGI lifespan of a web process: what starts and stops with the server.

With ``PUSH_BRIDGE_EMBEDDED`` (``make run``) each web process runs its own push bridge.
It starts with the server rather than with the first WebSocket: besides pushing, it
registers each order's newest version, which REST reads consult to skip Pinot for orders
that have not changed (:mod:`tracker.tracking.versions`), and an app that only polls
REST never opens a socket. Sockets still start it if it is not running (a test's ASGI
application gets no lifespan messages).
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from tracker.live.embedded import ensure_embedded_bridge, stop_embedded_bridge


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if settings.PUSH_BRIDGE_EMBEDDED:
                ensure_embedded_bridge(asyncio.get_running_loop(), get_channel_layer())
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(stop_embedded_bridge)
            await send({"type": "lifespan.shutdown.complete"})
            return

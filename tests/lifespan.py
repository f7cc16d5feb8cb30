"""An ASGI application's lifespan in a test, as a server runs it: startup, then shutdown.

uvicorn sends ``lifespan.startup`` before it accepts a connection and
``lifespan.shutdown`` when it stops; the web starts its push bridge on the first
(config/lifespan.py). Channels' ``WebsocketCommunicator`` sends neither, so a test of
the app's sockets runs the lifespan itself, around the test (the ``asgi_lifespan``
fixture): the app then starts exactly as it does under a server.
"""

from __future__ import annotations

from typing import Any

from asgiref.testing import ApplicationCommunicator

SCOPE = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}


class Lifespan:
    """One run of ``app``'s lifespan on the loop that awaits :meth:`startup` (both
    calls on that loop: the app publishes pushes to it)."""

    def __init__(self, app: Any, timeout: float = 30.0) -> None:
        self.app = app
        self.timeout = timeout
        self._communicator: ApplicationCommunicator | None = None

    async def startup(self) -> None:
        """Until the app has started (its push bridge follows the topics)."""
        self._communicator = ApplicationCommunicator(self.app, dict(SCOPE))
        await self._communicator.send_input({"type": "lifespan.startup"})
        answer = await self._communicator.receive_output(self.timeout)
        assert answer["type"] == "lifespan.startup.complete", answer

    async def shutdown(self) -> None:
        """Until the app has stopped what it started (the push bridge)."""
        communicator, self._communicator = self._communicator, None
        if communicator is None:
            return
        await communicator.send_input({"type": "lifespan.shutdown"})
        answer = await communicator.receive_output(self.timeout)
        assert answer["type"] == "lifespan.shutdown.complete", answer
        await communicator.wait(self.timeout)

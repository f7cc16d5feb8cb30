"""How a test sees a WebSocket refuse or close: the ``error`` message saying why, then the
close with the same code.

Every socket of the product closes this way (tracker/live/messages.py), so one helper
checks it everywhere. Where a refusal must come before anything else (access revoked, a
stranger), the very next message must be the error; where the socket was live when the
cause arrived (a Redis outage, a flood), what it had already queued may come first.
"""

from __future__ import annotations

import json
import time

from channels.testing import WebsocketCommunicator

#: How long a test waits for a socket's message or close: far more than a loaded machine
#: needs. How soon it comes is a latency, measured in bench/, never asserted in a test.
DEADLINE = 20.0


async def closed_with(
    socket: WebsocketCommunicator,
    code: int,
    *,
    within: float = DEADLINE,
    after_others: bool = False,
) -> dict:
    """The socket's ``error`` message with ``code`` within ``within`` seconds, then its
    close; with ``after_others``, other messages may come before the error."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no error {code} within {within} s"
        message = await socket.receive_output(timeout=left)
        if message["type"] == "websocket.close":
            raise AssertionError(f"closed with {message.get('code')} before an error message")
        body = json.loads(message["text"])
        if body["type"] == "error" or not after_others:
            break
    assert body["type"] == "error" and body["code"] == code, body
    closing = await socket.receive_output(timeout=within)
    assert closing == {"type": "websocket.close", "code": code}
    return body

"""Waiting in a test for something another process or thread makes true.

The engines, processes and sockets the tests drive answer in their own time (a Spark
micro-batch, a Pinot segment, a restarted worker), so a test polls for what it expects,
and fails with what it was waiting for when it does not come. One helper for it, so every
test polls and fails the same way; an ``async`` test uses :func:`wait_until_async` and
does not block its event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    message: str,
    *,
    interval: float = 0.5,
    ignoring: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy, and
    return that. After ``timeout`` seconds the test fails with ``message`` (what it waited
    for) and the last answer. An error in ``ignoring`` counts as a falsy answer (a server
    not listening yet, a broker still being asked about a node that is gone)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = condition()
        except ignoring as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(timeout, message, last))
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], Awaitable[T]],
    timeout: float,
    message: str,
    *,
    interval: float = 0.5,
    ignoring: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`wait_until` for a coroutine ``condition``, sleeping without blocking the loop."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = await condition()
        except ignoring as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(timeout, message, last))
        await asyncio.sleep(interval)


def _timed_out(timeout: float, message: str, last: object) -> str:
    return f"timed out after {timeout:g} s waiting for {message}; the last answer: {last!r}"

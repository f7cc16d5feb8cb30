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
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Errors = type[BaseException] | tuple[type[BaseException], ...]


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    message: str,
    *,
    interval: float = 0.5,
    ignoring: Errors = (),
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy, and
    return that. After ``timeout`` seconds the test fails with ``message`` (what it waited
    for) and the last answer. An error in ``ignoring`` counts as no answer yet (a server
    not listening yet, a broker still being asked about a node that is gone)."""
    deadline = _Deadline(timeout, message)
    while not (answer := _ask(condition, ignoring)):
        deadline.check(answer)
        time.sleep(interval)
    return answer


async def wait_until_async(
    condition: Callable[[], Awaitable[T]],
    timeout: float,
    message: str,
    *,
    interval: float = 0.5,
    ignoring: Errors = (),
) -> T:
    """:func:`wait_until` for a coroutine ``condition``, sleeping without blocking the loop."""
    deadline = _Deadline(timeout, message)
    while not (answer := await _ask_async(condition, ignoring)):
        deadline.check(answer)
        await asyncio.sleep(interval)
    return answer


@dataclass(frozen=True)
class _NoAnswer:
    """An ignored error: falsy, so the wait goes on, and named if the wait fails."""

    error: BaseException

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"no answer ({self.error!r})"


def _ask(condition: Callable[[], T], ignoring: Errors) -> T | _NoAnswer:
    try:
        return condition()
    except ignoring as exc:
        return _NoAnswer(exc)


async def _ask_async(condition: Callable[[], Awaitable[T]], ignoring: Errors) -> T | _NoAnswer:
    try:
        return await condition()
    except ignoring as exc:
        return _NoAnswer(exc)


class _Deadline:
    def __init__(self, timeout: float, message: str) -> None:
        self.timeout, self.message = timeout, message
        self.at = time.monotonic() + timeout

    def check(self, last: object) -> None:
        """Fail the test once the time is up, with what it waited for and the last answer."""
        if time.monotonic() >= self.at:
            raise AssertionError(
                f"timed out after {self.timeout:g} s waiting for {self.message}; "
                f"the last answer: {last!r}"
            )

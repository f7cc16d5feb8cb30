"""Delivering one socket's messages: every socket's machinery, apart from its consumer.

No gap between snapshot and deltas: the consumer joins its groups *before* reading the
snapshot; the deltas that arrive meanwhile are held, and once the snapshot is sent only
those with a higher version are forwarded (and every fast ``status`` message, which has
none: the client keeps the furthest status).

Slow clients: the consumer's handlers never await the network. Status updates wait in a
small queue (an order has at most eight statuses, so it is bounded by nature, and a
client that still falls behind is closed with 4408 so it reconnects with ``?since=``);
position updates coalesce to the latest per order.

Access holds for the socket's whole life: the consumer's verdict is asked again when
told to and every ``PUSH_RECHECK_SECONDS``, and the socket is closed when it fails or
cannot be reached (failing closed: 4503, the client reconnects and is checked again).
After a check that passed, the consumer may follow what changed (``checked``: a
courier's socket, whose deliveries come and go).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from tracker.cache.maps import bounded
from tracker.live import messages as m

MAX_QUEUED_STATUS_UPDATES = 256

log = logging.getLogger(__name__)

#: The consumer's answer to "may this socket stay open?": None, or a close code and reason
#: (runs in a database thread).
Verdict = Callable[[], tuple[int, str] | None]


#: Orders whose last version a socket remembers at most.
VERSIONS_KEPT = 100_000


class Delivery:
    """One socket's outbound queue, its writer, heartbeat and access re-checks."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        close: Callable[[int], Awaitable[None]],
        verdict: Verdict,
        checked: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._send, self._close, self._verdict = send, close, verdict
        self._checked = checked
        #: The latest version sent (or in the snapshot) per order, for the most recent
        #: :data:`VERSIONS_KEPT` orders (an operators' socket follows every order).
        self.versions = bounded(VERSIONS_KEPT)
        self._held: list[dict[str, Any]] | None = []  # deltas during the snapshot
        self._statuses: deque[dict[str, Any]] = deque()
        #: Coalescing, the latest per key: an order's update, or its fast position.
        self._latest: dict[Any, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        #: Set once the socket is refused or closing; background loops end with it.
        self.closing = False

    # ------------------------------------------------------------------ lifecycle

    def start(self, *extra: Coroutine[Any, Any, None]) -> None:
        """After the snapshot: forward what was held, then run the writer, the heartbeat,
        the periodic re-check and the consumer's ``extra`` loops."""
        held, self._held = self._held, None
        for message in held or []:
            self.enqueue(message)
        loops = [self._writer(), self._heartbeat(), self._periodic_recheck(), *extra]
        self._tasks = [asyncio.create_task(loop) for loop in loops]

    def stop(self) -> None:
        self.closing = True
        for task in self._tasks:
            task.cancel()

    async def refuse(self, code: int, reason: str, **details: Any) -> None:
        """Tell the client why (and ``details``, such as ``retry_after``), then close with
        ``code``."""
        self.closing = True
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        await self._send({"type": "error", "code": code, "message": reason, **details})
        await self._close(code)

    # ------------------------------------------------------------------ messages

    def push(self, message: dict[str, Any]) -> None:
        """A delta from the channel layer: held during the snapshot, queued after."""
        if self._held is not None:
            self._held.append(message)
        else:
            self.enqueue(message)

    def enqueue(self, message: dict[str, Any]) -> None:
        if message["type"] == "status":
            # The fast path's: no version to compare. The bridge sends each status once
            # and the client keeps the furthest status it has seen.
            self._statuses.append(message)
            self._wake.set()
            return
        if message["type"] == "position":
            # The fast path's courier point: no version either; the latest one suffices
            # (the client keeps the newest point by its time, whichever path brought it).
            self._latest[("position", message["order_id"])] = message
            self._wake.set()
            return
        if not self._newer(message):
            return
        order_id = message["order_id"]
        if message["kind"] == "status":
            self._latest.pop(order_id, None)  # the status message is newer and complete
            self._statuses.append(message)
        else:
            self._latest[order_id] = message
        self._wake.set()

    def _newer(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` is newer than what this socket has; remembers it if so."""
        order_id, version = message["order_id"], message["version"]
        if version <= self.versions.get(order_id, -1):
            return False
        self.versions[order_id] = version
        return True

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if len(self._statuses) > MAX_QUEUED_STATUS_UPDATES:
                await self.refuse(m.CLOSE_TOO_SLOW, "Too far behind; reconnect with ?since=.")
                return
            while self._statuses:
                await self._send(self._statuses.popleft())
            latest, self._latest = self._latest, {}
            for message in latest.values():
                await self._send(message)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(settings.PUSH_HEARTBEAT_SECONDS)
            await self._send({"type": "heartbeat", "server_time": time.time()})

    # ------------------------------------------------------------------ access

    async def _periodic_recheck(self) -> None:
        # The first check at a random point of the period: sockets opened together (a
        # server restart, a reconnect storm) then spread their checks instead of
        # queueing thousands of them on the database thread at once.
        period = settings.PUSH_RECHECK_SECONDS
        await asyncio.sleep(random.uniform(0, period))
        while not self.closing:
            try:
                await self.recheck()
            except Exception:  # noqa: BLE001 - the loop outlives anything one check raises
                log.exception("periodic access re-check failed")
            await asyncio.sleep(period)

    async def recheck(self) -> None:
        """Close the socket unless its access still holds; also when that cannot be decided
        (database unreachable or locked): 4503, and the client reconnects, which checks
        everything again."""
        if self.closing or self._held is not None:
            return  # already closing, or not connected yet (connect checks everything)
        try:
            verdict = await database_sync_to_async(self._verdict)()
        except Exception:  # noqa: BLE001 - fail closed, whatever stopped the check
            log.warning("access re-check could not run: closing the socket", exc_info=True)
            verdict = (m.CLOSE_UNAVAILABLE, "Access could not be checked; reconnect.")
        if verdict is not None:
            if not self.closing:
                await self.refuse(*verdict)
            return
        if self._checked is not None and not self.closing:
            await self._checked()


class CoalescingDelivery(Delivery):
    """Everything coalesces to the latest per order (a page that refreshes its panels on
    any change), and fleet messages into one with each courier's latest point."""

    def enqueue(self, message: dict[str, Any]) -> None:
        if message["type"] == "fleet":
            self._latest["fleet"] = merge_fleet(self._latest.get("fleet"), message)
            self._wake.set()
            return
        if not self._newer(message):
            return
        self._latest[message["order_id"]] = message
        self._wake.set()


def merge_fleet(pending: dict[str, Any] | None, message: dict[str, Any]) -> dict[str, Any]:
    """One fleet message in place of two not written yet: each courier's latest point,
    and a courier gone since only if it did not come back."""
    if pending is None:
        return message
    couriers = {c["courier_id"]: c for c in pending["couriers"]}
    for courier in message["gone"]:
        couriers.pop(courier, None)
    couriers.update((c["courier_id"], c) for c in message["couriers"])
    gone = {*pending["gone"], *message["gone"]} - couriers.keys()
    return m.fleet_message(list(couriers.values()), sorted(gone))

"""The operators' socket: every status change, the fleet and the pipeline's health."""

from __future__ import annotations

import asyncio
from typing import Any

from tracker.live import messages as m
from tracker.live.consumers import TrackingSocket
from tracker.live.delivery import CoalescingDelivery
from tracker.operations import pipeline
from tracker.orders import policy


class OperationsSocket(TrackingSocket):
    """``/ws/operations/``: operators only; a status change of any order, and the fleet
    (every courier on the road, at most once a second each).

    The operators' page refreshes its aggregate panels when one arrives, so a
    burst needs only the latest change per order: everything coalesces (bounded
    by the number of orders that changed since the last write); so do the fleet
    messages, into one with each courier's latest point.
    """

    delivery_class = CoalescingDelivery

    def follows(self, user: Any) -> list[str]:
        if not policy.is_operator(user):
            raise PermissionError("The operations feed is for operators.")
        return [m.OPERATIONS_GROUP]

    def background(self) -> list:
        return [self._pipeline_feed()]

    async def _pipeline_feed(self) -> None:
        """Each new sample of the pipeline's stages (:mod:`tracker.operations.pipeline`),
        for the page's strip; the monitor samples in this process, so no channel layer."""
        watch = pipeline.monitor()
        last = None
        while not self.delivery.closing:
            snap = watch.snapshot()
            if snap["sampled_at"] != last:
                last = snap["sampled_at"]
                await self.send_json({"type": "pipeline", **snap})
            await asyncio.sleep(min(1.0, watch.interval))

    async def send_snapshot(self) -> None:
        await self.send_json({"type": "snapshot"})

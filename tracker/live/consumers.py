"""WebSocket consumers: a snapshot, then every change, with no gap and bounded memory.

``/ws/orders/<id>/`` follows one order; ``/ws/orders/`` follows all of the
signed-in customer's orders; ``/ws/restaurants/<id>/`` one restaurant's orders
(its staff, operators); ``/ws/operations/`` every status change (operators). Who may follow what, and what a snapshot shows,
are the REST API's too: :mod:`tracker.orders.policy` and
:mod:`tracker.tracking.read_model`. A refused socket is accepted and then closed
with a documented code (see :mod:`tracker.live.messages`), because a close
before accepting reaches the client as a bare HTTP 403.

No gap between snapshot and deltas: the socket joins its group *before* reading
the snapshot, holds the deltas that arrive meanwhile, and after sending the
snapshot forwards only those with a higher version (and every fast ``status``
message, which has none: the client keeps the furthest status).

Slow clients: handlers never await the network. Status updates wait in a small
queue (an order has at most eight statuses, so it is bounded by nature, and a
client that still falls behind is closed with 4408 so it reconnects with
``?since=``); position updates coalesce to the latest per order.

Access holds for the socket's whole life, not only at connect: every socket
also joins its user's group and re-checks its credential and its access when
told to (:mod:`tracker.live.signals`: logout, token revoked or expired,
deactivation, order reassigned) and every ``PUSH_RECHECK_SECONDS``; it closes
with 4401 or 4404 when the check fails. A reconnect with ``?since=`` goes
through the same checks as a first connect before it may be ``resumed``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.core.exceptions import PermissionDenied
from prometheus_client import Gauge

from tracker.live import messages as m
from tracker.live.auth import credential_of, current_user
from tracker.live.bridge import ensure_embedded_bridge
from tracker.live.signals import relay_access_notices
from tracker.operations import pipeline
from tracker.orders import policy
from tracker.tracking import read_model, selectors
from tracker.tracking.exceptions import TrackingUnavailable

MAX_QUEUED_STATUS_UPDATES = 256

log = logging.getLogger(__name__)


OPEN_SOCKETS = Gauge(
    "ordertrack_websockets_open",
    "WebSockets open, by kind of socket",
    ["socket"],
    multiprocess_mode="livesum",
)


class TrackingSocket(AsyncJsonWebsocketConsumer):
    """Shared machinery: auth, snapshot-then-deltas, coalescing writer, heartbeats."""

    async def connect(self) -> None:
        await self.accept()
        self._open_gauge = OPEN_SOCKETS.labels(type(self).__name__)
        self._open_gauge.inc()
        self._versions: dict[int, int] = {}
        self._held: list[dict[str, Any]] | None = []  # deltas during the snapshot
        self._statuses: deque[dict[str, Any]] = deque()
        #: Coalescing, the latest per key: an order's update, or its fast position.
        self._positions: dict[Any, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._joined: list[str] = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(m.CLOSE_UNAUTHENTICATED, "Sign in first (session cookie or token).")
            return
        if settings.PUSH_BRIDGE_EMBEDDED:
            ready = ensure_embedded_bridge(asyncio.get_running_loop(), self.channel_layer)
            await asyncio.to_thread(ready.wait, 15)
        try:
            groups = await self.authorise(user)
        except PermissionError as exc:
            await self._refuse(m.CLOSE_NOT_FOUND, str(exc))
            return
        except ValueError as exc:
            await self._refuse(m.CLOSE_BAD_REQUEST, str(exc))
            return
        self._credential = credential_of(self.scope)
        self._closing = False
        # Changes made in other processes (another web worker's logout) reach this one's
        # sockets through the database when the channel layer cannot carry them.
        relay_access_notices(asyncio.get_running_loop(), self.channel_layer)
        for group in [*groups, m.user_group(user.pk)]:
            await self.channel_layer.group_add(group, self.channel_name)
            self._joined.append(group)
        try:
            await self.send_snapshot()
        except TrackingUnavailable:
            await self._refuse(m.CLOSE_UNAVAILABLE, "Tracking data is temporarily unavailable.")
            return
        held, self._held = self._held, None
        for message in held or []:
            self._enqueue(message)
        self._tasks = [
            asyncio.create_task(self._writer()),
            asyncio.create_task(self._heartbeat()),
            asyncio.create_task(self._periodic_recheck()),
        ]

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch, without its hop to the database thread before each message.

        Channels closes stale database connections before every handler, on the one
        database thread; with thousands of sockets, every pushed update then queues
        behind the access re-checks there. These handlers reach the database only
        through ``database_sync_to_async``, which closes stale connections around each
        call itself.
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def _refuse(self, code: int, reason: str) -> None:
        self._closing = True
        current = asyncio.current_task()
        for task in getattr(self, "_tasks", []):
            if task is not current:
                task.cancel()
        await self.send_json({"type": "error", "code": code, "message": reason})
        await self.close(code=code)

    # ------------------------------------------------------------------ access

    async def access_recheck(self, event: dict[str, Any]) -> None:
        """From :mod:`tracker.live.signals`: this user's or this order's access changed."""
        await self._recheck()

    async def _periodic_recheck(self) -> None:
        # The first check at a random point of the period: sockets opened together (a
        # server restart, a reconnect storm) then spread their checks instead of
        # queueing thousands of them on the database thread at once.
        period = settings.PUSH_RECHECK_SECONDS
        await asyncio.sleep(random.uniform(0, period))
        while not self._closing:
            try:
                await self._recheck()
            except Exception:  # noqa: BLE001 - the loop outlives anything one check raises
                log.exception("periodic access re-check failed")
            await asyncio.sleep(period)

    async def _recheck(self) -> None:
        """Close the socket unless its access still holds; also when that cannot be decided
        (database unreachable or locked): 4503, and the client reconnects, which checks
        everything again."""
        if getattr(self, "_closing", True):
            return  # not connected yet (connect checks everything) or already closing
        try:
            verdict = await database_sync_to_async(self._verdict)()
        except Exception:  # noqa: BLE001 - fail closed, whatever stopped the check
            log.warning("access re-check could not run: closing the socket", exc_info=True)
            verdict = (m.CLOSE_UNAVAILABLE, "Access could not be checked; reconnect.")
        if verdict is not None and not self._closing:
            await self._refuse(*verdict)

    def _verdict(self) -> tuple[int, str] | None:
        """None while access still holds, else the close code and reason (database thread)."""
        user = current_user(self._credential)
        if user is None:
            return (
                m.CLOSE_UNAUTHENTICATED,
                "Signed out, token expired or revoked, or account deactivated.",
            )
        try:
            self.still_authorised(user)
        except PermissionError as exc:
            return m.CLOSE_NOT_FOUND, str(exc)
        return None

    async def disconnect(self, code: int) -> None:
        if getattr(self, "_open_gauge", None) is not None:
            self._open_gauge.dec()
            self._open_gauge = None
        for task in getattr(self, "_tasks", []):
            task.cancel()
        for group in getattr(self, "_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "server_time": time.time()})

    # ------------------------------------------------------------------ deltas

    async def order_update(self, event: dict[str, Any]) -> None:
        """From the bridge, through the channel layer. Never awaits the client."""
        message = event["payload"]
        if self._held is not None:
            self._held.append(message)
        else:
            self._enqueue(message)

    def _enqueue(self, message: dict[str, Any]) -> None:
        if message["type"] == "status":
            # The fast path's: no version to compare. The bridge sends each status once
            # and the client keeps the furthest status it has seen.
            self._statuses.append(message)
            self._wake.set()
            return
        if message["type"] == "position":
            # The fast path's courier point: no version either; the latest one suffices
            # (the client keeps the newest point by its time, whichever path brought it).
            self._positions[("position", message["order_id"])] = message
            self._wake.set()
            return
        order_id, version = message["order_id"], message["version"]
        if version <= self._versions.get(order_id, -1):
            return
        self._versions[order_id] = version
        if message["kind"] == "status":
            self._positions.pop(order_id, None)  # the status message is newer and complete
            self._statuses.append(message)
        else:
            self._positions[order_id] = message
        self._wake.set()

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if len(self._statuses) > MAX_QUEUED_STATUS_UPDATES:
                await self._refuse(m.CLOSE_TOO_SLOW, "Too far behind; reconnect with ?since=.")
                return
            while self._statuses:
                await self.send_json(self._statuses.popleft())
            positions, self._positions = self._positions, {}
            for message in positions.values():
                await self.send_json(message)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(settings.PUSH_HEARTBEAT_SECONDS)
            await self.send_json({"type": "heartbeat", "server_time": time.time()})

    # ------------------------------------------------------------------ per route

    async def authorise(self, user: Any) -> list[str]:
        raise NotImplementedError

    def still_authorised(self, user: Any) -> None:
        """Raise PermissionError when ``user`` may no longer follow this socket's data."""
        raise NotImplementedError

    async def send_snapshot(self) -> None:
        raise NotImplementedError


def _since(scope: dict[str, Any]) -> int | None:
    from urllib.parse import parse_qs

    raw = parse_qs(scope.get("query_string", b"").decode()).get("since")
    if not raw:
        return None
    try:
        return int(raw[0])
    except ValueError:
        raise ValueError("since must be an integer version") from None


class OrderSocket(TrackingSocket):
    """``/ws/orders/<id>/``: one order's status, courier position, distance and ETA."""

    async def authorise(self, user: Any) -> list[str]:
        self.order_id = int(self.scope["url_route"]["kwargs"]["order_id"])
        self.since = _since(self.scope)
        await database_sync_to_async(self.still_authorised)(user)
        return [m.order_group(self.order_id)]

    def still_authorised(self, user: Any) -> None:
        if not policy.can_see(user, self.order_id):
            raise PermissionError("No such order.")

    async def send_snapshot(self) -> None:
        if self.since is not None:
            state = await database_sync_to_async(selectors.order_state)(self.order_id)
            if state is not None and state.version == self.since:
                self._versions[self.order_id] = state.version
                await self.send_json(
                    {"type": "resumed", "order_id": self.order_id, "version": state.version}
                )
                return
        detail = await database_sync_to_async(read_model.order_detail)(
            self.order_id, viewer=self.scope["user"]
        )
        version = detail["tracking"]["version"]
        self._versions[self.order_id] = version
        await self.send_json({"type": "snapshot", "version": version, "order": detail})


class CustomerOrdersSocket(TrackingSocket):
    """``/ws/orders/``: changes to any of the signed-in customer's orders."""

    async def authorise(self, user: Any) -> list[str]:
        self.list_scope = await database_sync_to_async(self._customer_scope)(user)
        return [m.customer_group(self.list_scope["customer_id"])]

    def still_authorised(self, user: Any) -> None:
        if self._customer_scope(user) != self.list_scope:
            raise PermissionError("Only customers have an order list to follow.")

    @staticmethod
    def _customer_scope(user: Any) -> dict[str, Any]:
        try:
            return policy.list_scope(user, "customer")
        except PermissionDenied:
            raise PermissionError("Only customers have an order list to follow.") from None

    async def send_snapshot(self) -> None:
        rows = await database_sync_to_async(selectors.list_orders)(**self.list_scope, limit=50)
        for row in rows:
            self._versions[row.order_id] = row.version
        await self.send_json(
            {"type": "snapshot", "orders": [read_model.order_summary(r) for r in rows]}
        )


def _may_run(user: Any, restaurant_id: int) -> None:
    """Anyone but its staff and operators is told the restaurant does not exist (4404),
    as in REST."""
    if not policy.can_see_restaurant(user, restaurant_id):
        raise PermissionError("No such restaurant.")


class RestaurantOrdersSocket(TrackingSocket):
    """``/ws/restaurants/<id>/``: the kitchen board, every change to one restaurant's orders.

    Snapshot: the restaurant's active orders (the REST list items). Updates: the same
    ``update`` messages as the order sockets, for every order of this restaurant only.
    """

    #: Active orders a board shows at most (the snapshot's size bound).
    SNAPSHOT_LIMIT = 200

    async def authorise(self, user: Any) -> list[str]:
        self.restaurant_id = int(self.scope["url_route"]["kwargs"]["restaurant_id"])
        await database_sync_to_async(_may_run)(user, self.restaurant_id)
        return [m.restaurant_group(self.restaurant_id)]

    def still_authorised(self, user: Any) -> None:
        _may_run(user, self.restaurant_id)

    async def send_snapshot(self) -> None:
        rows = await database_sync_to_async(selectors.list_orders)(
            restaurant_ids=[self.restaurant_id], state="active", limit=self.SNAPSHOT_LIMIT
        )
        for row in rows:
            self._versions[row.order_id] = row.version
        await self.send_json(
            {
                "type": "snapshot",
                "restaurant_id": self.restaurant_id,
                "orders": [read_model.order_summary(r) for r in rows],
            }
        )


class OperationsSocket(TrackingSocket):
    """``/ws/operations/``: operators only; a status change of any order, and the fleet
    (every courier on the road, at most once a second each).

    The operators' page refreshes its aggregate panels when one arrives, so a
    burst needs only the latest change per order: everything coalesces (bounded
    by the number of orders that changed since the last write); so do the fleet
    messages, into one with each courier's latest point.
    """

    async def authorise(self, user: Any) -> list[str]:
        if not await database_sync_to_async(policy.is_operator)(user):
            raise PermissionError("The operations feed is for operators.")
        return [m.OPERATIONS_GROUP]

    def still_authorised(self, user: Any) -> None:
        if not policy.is_operator(user):
            raise PermissionError("The operations feed is for operators.")

    def _enqueue(self, message: dict[str, Any]) -> None:
        if message["type"] == "fleet":
            self._positions["fleet"] = _merge_fleet(self._positions.get("fleet"), message)
            self._wake.set()
            return
        order_id, version = message["order_id"], message["version"]
        if version <= self._versions.get(order_id, -1):
            return
        self._versions[order_id] = version
        if len(self._versions) > 100_000:  # forget the oldest orders (bounded memory)
            for key in list(self._versions)[:50_000]:
                del self._versions[key]
        self._positions[order_id] = message
        self._wake.set()

    async def connect(self) -> None:
        await super().connect()
        if not getattr(self, "_closing", True):
            self._tasks.append(asyncio.create_task(self._pipeline_feed()))

    async def _pipeline_feed(self) -> None:
        """Each new sample of the pipeline's stages (:mod:`tracker.operations.pipeline`),
        for the page's strip; the monitor samples in this process, so no channel layer."""
        watch = pipeline.monitor()
        last = None
        while not self._closing:
            snap = watch.snapshot()
            if snap["sampled_at"] != last:
                last = snap["sampled_at"]
                await self.send_json({"type": "pipeline", **snap})
            await asyncio.sleep(min(1.0, watch.interval))

    async def send_snapshot(self) -> None:
        await self.send_json({"type": "snapshot"})


def _merge_fleet(pending: dict[str, Any] | None, message: dict[str, Any]) -> dict[str, Any]:
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

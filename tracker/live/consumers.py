"""WebSocket consumers: a snapshot, then every change, with no gap and bounded memory.

This module is what every socket shares (:class:`TrackingSocket`); the sockets are
:mod:`tracker.live.order_sockets`, :mod:`tracker.live.operations_socket` and
:mod:`tracker.live.share_socket`, routed in :mod:`tracker.live.routing`.

``/ws/orders/<id>/`` follows one order; ``/ws/orders/`` follows all of the
signed-in customer's orders; ``/ws/restaurants/<id>/`` one restaurant's orders
(its staff, operators); ``/ws/operations/`` every status change (operators);
``/ws/share/<token>/`` one order as a shared tracking link shows it (no sign-in);
``/ws/courier/`` the deliveries the signed-in courier carries now. Who
may follow what, and what a snapshot shows, are the REST API's too:
:mod:`tracker.orders.policy` and :mod:`tracker.tracking.read_model`. A refused
socket is accepted and then closed with a documented code (see
:mod:`tracker.live.messages`), because a close before accepting reaches the
client as a bare HTTP 403.

Each consumer is a few hooks, as Channels' generic consumers are: ``admit`` (who is
asking, within what budget: the signed-in user; a share socket's link), ``follows``
(the groups the viewer may follow through it, asked of the policy at connect and
again for the socket's whole life: access holds while the answer is the same, or, on a
socket that ``refollows``, follows the new answer with a fresh snapshot) and
``send_snapshot``. The delivery machinery
(held deltas, the writer, heartbeats, the re-checks, failing closed) is
:class:`tracker.live.delivery.Delivery`. Every socket also joins its user's group,
so it is re-checked when told to (:mod:`tracker.live.signals`: logout, token
revoked or expired, deactivation, order reassigned); it closes with 4401 or 4404
when the check fails. A reconnect with ``?since=`` goes through the same checks
as a first connect before it may be ``resumed``. While Redis (the channel layer, the
socket budgets) cannot be reached, connects are refused and open sockets close, with
4503 (:meth:`TrackingSocket.__call__`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from runtime.redis_errors import REDIS_UNREACHABLE
from tracker.live import limits
from tracker.live import messages as m
from tracker.live.auth import credential_of, current_user
from tracker.live.delivery import Delivery
from tracker.live.metrics import OPEN_SOCKETS
from tracker.live.signals import relay_access_notices
from tracker.orders import policy
from tracker.tracking import read_model
from tracker.tracking.exceptions import TrackingUnavailable
from tracker.tracking.serializers import to_json

log = logging.getLogger(__name__)

#: Why a connect is refused: the close code, the reason and details for the error message.
Refused = tuple[int, str, dict[str, Any]]

#: This process's open sockets. With channels_redis they read through one wait, in turn:
#: after a quick Redis restart, those whose turn comes once it is back read from a server
#: that lost their group memberships, and would stay open with nothing to receive. So
#: when one finds Redis gone, every socket on its layer closes.
_open_sockets: weakref.WeakSet[TrackingSocket] = weakref.WeakSet()


class TrackingSocket(AsyncJsonWebsocketConsumer):
    """Sign-in, the hooks in order, and the channel-layer handlers; the rest is delivery."""

    delivery_class: type[Delivery] = Delivery

    #: Headers of the handshake's answer (``websocket.accept``).
    handshake_headers: tuple[tuple[bytes, bytes], ...] = ()
    #: The close code and reason when the socket's credential stops working.
    credential_gone = (
        m.CLOSE_UNAUTHENTICATED,
        "Signed out, token expired or revoked, or account deactivated.",
    )
    #: What a re-check does when the viewer may still follow something, but no longer what
    #: the socket follows: close with 4404 (a socket opened for one order or restaurant), or
    #: follow the new answer and send a fresh snapshot (a courier's deliveries come and go).
    refollows = False
    _moved: list[str] | None = None  # the answer a re-check found, while not yet followed
    _moving: asyncio.Lock | None = None  # a told re-check and the periodic one may meet
    _client_gone = False  # the client closed, or went away

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        """Channels' consumer, closing with 4503 (once told why) when Redis cannot be
        reached: at connect, counting the connect or joining a group; on an open socket,
        reading its next message from the channel layer, and then every other open
        socket of the process with it (:meth:`_redis_gone`). A socket the layer no
        longer feeds must not pass for live: its client reconnects with ``?since=``,
        misses nothing, and is refused with 4503 until Redis answers again."""
        try:
            await super().__call__(scope, receive, send)
        except REDIS_UNREACHABLE as exc:
            if getattr(self, "delivery", None) is None:
                raise  # not accepted yet: nothing of ours ran (no such path today)
            if not self._client_gone:
                await self._redis_gone(exc)
            # Channels' websocket_disconnect did not run (or stopped at the layer): the
            # groups are left as they are (a membership lapses with the layer's
            # group_expiry), the rest is let go as on any close.
            await self.disconnect(m.CLOSE_UNAVAILABLE)

    async def _redis_gone(self, exc: Exception) -> None:
        """Close with 4503, and every other open socket on this channel layer: budgets
        cannot be counted, updates cannot reach them, and their group memberships may be
        gone with the server (:data:`_open_sockets`). One warning line, no traceback: an
        outage closes every socket at once."""
        if self.delivery.closing:
            return
        others = [
            s
            for s in _open_sockets
            if s is not self and s.channel_layer is self.channel_layer and not s.delivery.closing
        ]
        log.warning(
            "websocket closed with 4503, and %d other open sockets: redis unreachable: %s",
            len(others),
            exc,
        )
        reason = "Live updates are unavailable right now; reconnect shortly."
        await asyncio.gather(
            self.delivery.refuse(m.CLOSE_UNAVAILABLE, reason),
            *(other.delivery.refuse(m.CLOSE_UNAVAILABLE, reason) for other in others),
            return_exceptions=True,  # a client already gone does not keep the others open
        )

    async def connect(self) -> None:
        await self.accept(headers=self.handshake_headers)
        self._open_gauge = OPEN_SOCKETS.labels(type(self).__name__)
        self._open_gauge.inc()
        self.delivery = self.delivery_class(
            self.send_json, self._close, self._verdict, self._follow_moves
        )
        # Before any access check or snapshot: what every connect costs is bounded.
        refusal = await self.admit()
        if refusal is not None:
            code, reason, details = refusal
            await self.delivery.refuse(code, reason, **details)
            return
        self._messages = limits.MessageRate()
        try:
            self.followed = await database_sync_to_async(self.follows)(self.viewer)
        except PermissionError as exc:
            await self.delivery.refuse(m.CLOSE_NOT_FOUND, str(exc))
            return
        except ValueError as exc:
            await self.delivery.refuse(m.CLOSE_BAD_REQUEST, str(exc))
            return
        # Changes made in other processes (another web worker's logout) reach this one's
        # sockets through the database when the channel layer cannot carry them.
        relay_access_notices(asyncio.get_running_loop(), self.channel_layer)
        for group in [*self.followed, *self.own_groups()]:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups.append(group)  # left by Channels' websocket_disconnect
        try:
            await self.send_snapshot()
        except TrackingUnavailable:
            await self.delivery.refuse(
                m.CLOSE_UNAVAILABLE, "Tracking data is temporarily unavailable."
            )
            return
        except policy.NotVisible:  # access went between the check and the snapshot
            await self.delivery.refuse(m.CLOSE_NOT_FOUND, "No such order.")
            return
        self.delivery.start(*self.background(), self._hold_slot())
        _open_sockets.add(self)

    async def admit(self) -> Refused | None:
        """Who is asking (``self.viewer``) and whether their budget allows one more socket:
        None, or why not. Here: the signed-in user (4401 when nobody is), within their
        connect rate and open sockets (4429)."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return m.CLOSE_UNAUTHENTICATED, "Sign in first (session cookie or token).", {}
        self._slots = limits.SocketSlots(user.pk, self.channel_name)
        refusal = await limits.admit(user.pk, self._slots)
        if refusal is not None:
            return m.CLOSE_TOO_MANY, refusal.reason, {"retry_after": refusal.retry_after}
        self.viewer = user
        self._credential = credential_of(self.scope)
        return None

    def own_groups(self) -> list[str]:
        """Groups the socket joins to hear that its viewer's access may have changed."""
        return [m.user_group(self.viewer.pk)]

    def current_viewer(self) -> Any:
        """Whom the socket's credential stands for now; None once it no longer works
        (database thread)."""
        return current_user(self._credential)

    async def _hold_slot(self) -> None:
        """Renew this socket's place among its user's sockets while it is open; one that
        cannot be renewed would lapse and stop counting, so the socket closes (4503)."""
        while not self.delivery.closing:
            await asyncio.sleep(self._slots.RENEW_SECONDS)
            try:
                await limits.renew(self._slots)
            except REDIS_UNREACHABLE as exc:
                await self._redis_gone(exc)
                return

    async def _close(self, code: int) -> None:
        await self.close(code=code)
        await self._release_slot()  # a closing socket no longer counts

    async def _release_slot(self) -> None:
        """Give this socket's slot back; one that cannot be (Redis unreachable) lapses
        after ``SocketSlots.LEASE_SECONDS``."""
        if getattr(self, "_slots", None) is None:
            return
        with contextlib.suppress(*REDIS_UNREACHABLE):
            await limits.release(self._slots)

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

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self._client_gone = True  # whatever fails now, nobody is left to tell
        await super().websocket_disconnect(message)

    async def disconnect(self, code: int) -> None:
        _open_sockets.discard(self)
        if getattr(self, "_open_gauge", None) is not None:
            self._open_gauge.dec()
            self._open_gauge = None
        if getattr(self, "delivery", None) is not None:
            self.delivery.stop()
        await self._release_slot()

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        """A client message: refused unread when over ``WS_MAX_MESSAGE_BYTES`` (1009) or
        past the socket's ``WS_PING_RATE`` (4429); else parsed and answered."""
        delivery = getattr(self, "delivery", None)
        if delivery is None or delivery.closing:
            return  # refused or closing: nothing more is read
        size, limit = limits.message_size(message), settings.WS_MAX_MESSAGE_BYTES
        if size > limit:
            await delivery.refuse(
                m.CLOSE_MESSAGE_TOO_BIG, f"A message may be at most {limit} bytes ({size} sent)."
            )
            return
        wait = self._messages.hit()
        if wait is not None:
            await delivery.refuse(
                m.CLOSE_TOO_MANY,
                f"Too many messages: at most {settings.WS_PING_RATE} per socket.",
                retry_after=wait,
            )
            return
        await super().websocket_receive(message)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "server_time": time.time()})

    # ------------------------------------------------------------------ channel layer

    async def order_update(self, event: dict[str, Any]) -> None:
        """From the bridge, through the channel layer. Never awaits the client."""
        self.delivery.push(event["payload"])

    async def access_recheck(self, event: dict[str, Any]) -> None:
        """From :mod:`tracker.live.signals`: this user's or this order's access changed."""
        await self.delivery.recheck()

    def _verdict(self) -> tuple[int, str] | None:
        """None while access still holds, else the close code and reason (database thread)."""
        viewer = self.current_viewer()
        if viewer is None:
            return self.credential_gone
        try:
            followed = self.follows(viewer)
        except PermissionError as exc:
            return m.CLOSE_NOT_FOUND, str(exc)
        if followed != self.followed:
            if not self.refollows:
                return m.CLOSE_NOT_FOUND, "This socket follows what is no longer yours."
            self._moved = followed
        return None

    async def _follow_moves(self) -> None:
        """After a re-check that passed: follow what it found changed (a socket that
        ``refollows``), leaving the groups no longer followed and joining the new ones,
        then send a fresh snapshot. A snapshot that cannot be read closes the socket
        (4503), as at connect."""
        if self._moved is None:
            return
        if self._moving is None:
            self._moving = asyncio.Lock()
        async with self._moving:
            moved, self._moved = self._moved, None
            if moved is None or moved == self.followed or self.delivery.closing:
                return
            try:
                for group in [g for g in self.followed if g not in moved]:
                    await self.channel_layer.group_discard(group, self.channel_name)
                    self.groups.remove(group)
                for group in [g for g in moved if g not in self.followed]:
                    await self.channel_layer.group_add(group, self.channel_name)
                    self.groups.append(group)
            except REDIS_UNREACHABLE as exc:  # half moved: what it follows is not known
                await self._redis_gone(exc)
                return
            self.followed = moved
            try:
                await self.send_snapshot()
            except Exception:  # noqa: BLE001 - fail closed, whatever stopped the snapshot
                log.warning("could not send a socket's new snapshot: closing it", exc_info=True)
                await self.delivery.refuse(
                    m.CLOSE_UNAVAILABLE, "Tracking data is temporarily unavailable."
                )

    # ------------------------------------------------------------------ hooks

    def follows(self, viewer: Any) -> list[str]:
        """The groups ``viewer`` may follow through this socket (in a database thread):
        PermissionError (4404) when none, ValueError (4400) for a malformed request."""
        raise NotImplementedError

    async def send_snapshot(self) -> None:
        raise NotImplementedError

    def background(self) -> list:
        """Loops of this kind of socket to run beside the delivery's."""
        return []


def shown_detail(order_id: int, viewer: policy.Actor) -> dict[str, Any]:
    """The order's detail as REST answers it (on the database thread: it reads, and
    rendering a long trail is better kept off the event loop)."""
    return to_json(read_model.order_detail(order_id, viewer=viewer))

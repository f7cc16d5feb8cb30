"""WebSocket consumers: a snapshot, then every change, with no gap and bounded memory.

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
as a first connect before it may be ``resumed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from prometheus_client import Gauge

from contract.events import TERMINAL_STATUSES
from tracker.live import limits
from tracker.live import messages as m
from tracker.live.auth import credential_of, current_user
from tracker.live.bridge import ensure_embedded_bridge
from tracker.live.delivery import CoalescingDelivery, Delivery
from tracker.live.signals import relay_access_notices
from tracker.operations import pipeline
from tracker.orders import policy
from tracker.sharing import selectors as sharing
from tracker.sharing import tokens
from tracker.tracking import read_model, selectors
from tracker.tracking.exceptions import TrackingUnavailable
from tracker.tracking.serializers import to_json

log = logging.getLogger(__name__)

#: Why a connect is refused: the close code, the reason and details for the error message.
Refused = tuple[int, str, dict[str, Any]]

OPEN_SOCKETS = Gauge(
    "ordertrack_websockets_open",
    "WebSockets open, by kind of socket",
    ["socket"],
    multiprocess_mode="livesum",
)


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
        if settings.PUSH_BRIDGE_EMBEDDED:
            ready = ensure_embedded_bridge(asyncio.get_running_loop(), self.channel_layer)
            await asyncio.to_thread(ready.wait, 15)
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
        """Renew this socket's place among its user's sockets while it is open."""
        while not self.delivery.closing:
            await asyncio.sleep(self._slots.RENEW_SECONDS)
            await limits.renew(self._slots)

    async def _close(self, code: int) -> None:
        await self.close(code=code)
        if getattr(self, "_slots", None) is not None:
            await limits.release(self._slots)  # a closing socket no longer counts

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

    async def disconnect(self, code: int) -> None:
        if getattr(self, "_open_gauge", None) is not None:
            self._open_gauge.dec()
            self._open_gauge = None
        if getattr(self, "delivery", None) is not None:
            self.delivery.stop()
        if getattr(self, "_slots", None) is not None:
            await limits.release(self._slots)

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
            for group in [g for g in self.followed if g not in moved]:
                await self.channel_layer.group_discard(group, self.channel_name)
                self.groups.remove(group)
            for group in [g for g in moved if g not in self.followed]:
                await self.channel_layer.group_add(group, self.channel_name)
                self.groups.append(group)
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
    """The order's detail as REST answers it (database thread: it reads, and rendering a
    long trail is better kept off the event loop)."""
    return to_json(read_model.order_detail(order_id, viewer=viewer))


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

    def follows(self, user: Any) -> list[str]:
        self.order_id = int(self.scope["url_route"]["kwargs"]["order_id"])
        self.since = _since(self.scope)
        if not policy.can_see(user, self.order_id):
            raise PermissionError("No such order.")
        return [m.order_group(self.order_id)]

    async def send_snapshot(self) -> None:
        if self.since is not None:
            state = await database_sync_to_async(selectors.order_state)(self.order_id)
            if state is not None and state.version == self.since:
                self.delivery.versions[self.order_id] = state.version
                await self.send_json(
                    {"type": "resumed", "order_id": self.order_id, "version": state.version}
                )
                return
        detail = await database_sync_to_async(shown_detail)(self.order_id, self.scope["user"])
        version = detail["tracking"]["version"]
        self.delivery.versions[self.order_id] = version
        await self.send_json({"type": "snapshot", "version": version, "order": detail})


class CustomerOrdersSocket(TrackingSocket):
    """``/ws/orders/``: changes to any of the signed-in customer's orders."""

    def follows(self, user: Any) -> list[str]:
        try:
            self.list_scope = policy.list_scope(user, "customer")
        except PermissionDenied:
            raise PermissionError("Only customers have an order list to follow.") from None
        return [m.customer_group(self.list_scope["customer_id"])]

    async def send_snapshot(self) -> None:
        rows = await database_sync_to_async(selectors.list_orders)(**self.list_scope, limit=50)
        for row in rows:
            self.delivery.versions[row.order_id] = row.version
        await self.send_json(
            {"type": "snapshot", "orders": [to_json(read_model.order_summary(r)) for r in rows]}
        )


class RestaurantOrdersSocket(TrackingSocket):
    """``/ws/restaurants/<id>/``: the kitchen board, every change to one restaurant's orders.

    Snapshot: the restaurant's active orders (the REST list items). Updates: the same
    ``update`` messages as the order sockets, for every order of this restaurant only.
    """

    #: Active orders a board shows at most (the snapshot's size bound).
    SNAPSHOT_LIMIT = 200

    def follows(self, user: Any) -> list[str]:
        """Its staff and operators; to anyone else the restaurant does not exist (4404),
        as in REST."""
        self.restaurant_id = int(self.scope["url_route"]["kwargs"]["restaurant_id"])
        if not policy.can_see_restaurant(user, self.restaurant_id):
            raise PermissionError("No such restaurant.")
        return [m.restaurant_group(self.restaurant_id)]

    async def send_snapshot(self) -> None:
        rows = await database_sync_to_async(selectors.list_orders)(
            restaurant_ids=[self.restaurant_id], state="active", limit=self.SNAPSHOT_LIMIT
        )
        for row in rows:
            self.delivery.versions[row.order_id] = row.version
        await self.send_json(
            {
                "type": "snapshot",
                "restaurant_id": self.restaurant_id,
                "orders": [to_json(read_model.order_summary(r)) for r in rows],
            }
        )


class CourierSocket(TrackingSocket):
    """``/ws/courier/``: the deliveries the signed-in courier carries now (assigned to them,
    neither delivered nor cancelled), each as its order's socket shows it.

    Snapshot: each delivery's REST detail. Then every change to them: ``update``, and the
    fast ``status`` and ``position`` messages (the courier's own points, as the server
    took them). What it follows moves with the courier's work, so it ``refollows``: a
    delivery assigned to them, taken away or finished changes :meth:`follows`, and the
    socket follows the new answer with a fresh snapshot rather than closing. An
    assignment asks the courier's sockets to re-check at once, a delivery taken away its
    order's sockets (:mod:`tracker.live.signals`); a finished one leaves at the next
    periodic re-check (the page has the status already). A user who is not, or no longer,
    a courier gets 4404.
    """

    refollows = True
    #: Deliveries a snapshot shows at most (a courier carries a few at a time).
    CARRIED_LIMIT = 20

    def follows(self, user: Any) -> list[str]:
        if policy.courier_of(user) is None:
            raise PermissionError("This socket is for couriers.")
        carried = policy.carried_now(user).order_by("pk").values_list("pk", flat=True)
        return [m.order_group(pk) for pk in carried[: self.CARRIED_LIMIT]]

    async def send_snapshot(self) -> None:
        orders = await database_sync_to_async(self._carried)(list(self.followed))
        for detail in orders:
            known = self.delivery.versions.get(detail["id"], -1)
            self.delivery.versions[detail["id"]] = max(known, detail["tracking"]["version"])
        await self.send_json({"type": "snapshot", "orders": orders})

    def _carried(self, groups: list[str]) -> list[dict[str, Any]]:
        """The detail of each order in ``groups`` the courier may still see (database
        thread); one taken away since the check is left out (the next check says so)."""
        shown = []
        for group in groups:
            try:
                shown.append(shown_detail(m.order_of_group(group), self.viewer))
            except policy.NotVisible:
                continue
        return shown


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


class ShareSocket(TrackingSocket):
    """``/ws/share/<token>/``: one order as its shared tracking link shows it, no sign-in.

    The link is the credential: the token is looked up at connect (after the client
    address's connect budget is spent, so guessing costs the guesser) and again for the
    socket's whole life, through its digest only. Unknown, malformed, revoked and ended
    links all close with 4404 and the same reason. Revoking closes the link's sockets
    within a second (its save asks the order's sockets to re-check:
    :mod:`tracker.live.signals`), and so does the link's end: a timer runs to it, and a
    status that ends the order re-checks at once (the end may have come closer).

    Every message goes out through :meth:`send_json`, rebuilt from
    :data:`tracker.live.messages.SHARE_ALLOW_LIST`: the order's own snapshot and
    deltas arrive here as for its customer, and none leaves as it came.
    """

    handshake_headers = tuple(
        (name.lower().encode(), value.encode()) for name, value in tokens.PRIVATE_HEADERS.items()
    )
    credential_gone = (m.CLOSE_NOT_FOUND, "This tracking link has expired or was revoked.")
    NO_SUCH_LINK = "No such tracking link, or it has expired or was revoked."
    _token_hash: str | None = None
    _shown: str | None = None  # the status the page shows (messages.furthest)

    async def admit(self) -> Refused | None:
        refusal = await limits.admit_share(limits.socket_client(self.scope))
        if refusal is not None:
            return m.CLOSE_TOO_MANY, refusal.reason, {"retry_after": refusal.retry_after}
        token = self.scope["url_route"]["kwargs"]["token"]  # all of the path after ws/share/
        token = token[:-1] if token.endswith("/") else token
        self._token_hash = tokens.digest(token) if tokens.well_formed(token) else None
        holder = await database_sync_to_async(self.current_viewer)()
        if holder is None:
            return m.CLOSE_NOT_FOUND, self.NO_SUCH_LINK, {}
        size = settings.SHARE_MAX_SOCKETS_PER_LINK
        self._slots = limits.SocketSlots(f"share-{holder.link_id}", self.channel_name, size)
        refusal = await limits.claim_share(self._slots)
        if refusal is not None:
            return m.CLOSE_TOO_MANY, refusal.reason, {"retry_after": refusal.retry_after}
        self._order_ended = asyncio.Event()
        return None

    def current_viewer(self) -> policy.LinkHolder | None:
        """The link's holder while it works (database thread); its end, which the order's
        end can bring closer, is kept for :meth:`_close_at_the_end`."""
        if self._token_hash is None:
            return None
        holder = sharing.holder_for_digest(self._token_hash)
        if holder is not None:
            self.viewer = holder
        return holder

    def own_groups(self) -> list[str]:
        return []  # revocations reach it through its order's group (follows)

    def follows(self, viewer: policy.LinkHolder) -> list[str]:
        if not policy.can_see(viewer, viewer.order_id):
            raise PermissionError(self.NO_SUCH_LINK)
        return [m.order_group(viewer.order_id)]

    async def send_snapshot(self) -> None:
        order_id = self.viewer.order_id
        detail = await database_sync_to_async(shown_detail)(order_id, self.viewer)
        version = detail["tracking"]["version"]
        self.delivery.versions[order_id] = version
        await self.send_json({"type": "snapshot", "version": version, "order": detail})

    async def send_json(self, content: dict[str, Any], close: bool = False) -> None:
        """Send what the allow-list makes of ``content``, or nothing."""
        self._shown = m.furthest(self._shown, m.status_carried(content))
        shared = m.share_view(content, self._shown)
        if shared is not None:
            await super().send_json(shared, close=close)

    async def order_update(self, event: dict[str, Any]) -> None:
        await super().order_update(event)
        if event["payload"].get("status") in TERMINAL_STATUSES:
            self._order_ended.set()

    def background(self) -> list:
        return [self._close_at_the_end()]

    async def _close_at_the_end(self) -> None:
        """Re-check when the link's end comes (it closes the socket then), and as soon as
        a status says the order ended. The end is looked at every second: the periodic
        re-check may have brought it closer."""
        while not self.delivery.closing:
            left = (self.viewer.ends_at - timezone.now()).total_seconds()
            if left > 0:
                try:
                    await asyncio.wait_for(self._order_ended.wait(), timeout=min(left, 1.0))
                except TimeoutError:
                    continue
                self._order_ended.clear()
            await self.delivery.recheck()
            await asyncio.sleep(0.1)

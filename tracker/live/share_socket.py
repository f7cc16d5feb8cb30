"""The socket behind a shared tracking link: no sign-in, the link is the credential, and
every message is rebuilt from the share allow-list."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from contract.events import TERMINAL_STATUSES
from tracker.live import limits
from tracker.live import messages as m
from tracker.live.consumers import Refused, TrackingSocket, shown_detail
from tracker.orders import policy
from tracker.sharing import selectors as sharing
from tracker.sharing import tokens


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
    _order_ended = False  # a status said the order ended: re-check at once
    _shown: str | None = None  # the status the page shows (messages.furthest)
    #: The order's exact delivery point, from its snapshot: points near it are held back.
    _destination: tuple[float, float] | None = None

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
        slots = limits.SlotPair(
            limits.SocketSlots(f"share-{holder.link_id}", self.channel_name, size),
            limits.SocketSlots(holder.creator_id, self.channel_name),
        )
        refusal = await limits.claim_share(slots)
        if refusal is not None:
            return m.CLOSE_TOO_MANY, refusal.reason, {"retry_after": refusal.retry_after}
        self._slots = slots
        self._wake = asyncio.Event()  # the order ended, or a re-check ran
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

    async def _follow_moves(self) -> None:
        """After every re-check that kept the socket: the link's end may have come closer,
        so the timer to it (:meth:`_close_at_the_end`) sleeps again to the end as it stands."""
        await super()._follow_moves()
        if getattr(self, "_wake", None) is not None:
            self._wake.set()

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
        self._destination = m.destination_of(content) or self._destination
        shared = m.share_view(content, self._shown, self._destination)
        if shared is not None:
            await super().send_json(shared, close=close)

    async def order_update(self, event: dict[str, Any]) -> None:
        await super().order_update(event)
        if event["payload"].get("status") in TERMINAL_STATUSES:
            self._order_ended = True
            self._wake.set()

    def background(self) -> list:
        return [self._close_at_the_end()]

    async def _close_at_the_end(self) -> None:
        """Re-check when the link's end comes (it closes the socket then), and as soon as
        a status says the order ended. It sleeps until that end; a re-check that kept the
        socket wakes it (:meth:`_follow_moves`: the end may have come closer) to sleep
        again until the end as it now stands."""
        while not self.delivery.closing:
            left = (self.viewer.ends_at - timezone.now()).total_seconds()
            if left > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=left)
                except TimeoutError:
                    continue
                self._wake.clear()
                if not self._order_ended:
                    continue
                self._order_ended = False
            await self.delivery.recheck()
            await asyncio.sleep(0.1)

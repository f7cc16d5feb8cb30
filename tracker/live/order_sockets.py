"""The sockets that follow orders: one order, a customer's orders, a restaurant's board,
and the deliveries a courier carries. Each sends the REST API's shapes
(:mod:`tracker.tracking.read_model`) as its snapshot, then the bridge's updates.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.core.exceptions import PermissionDenied

from tracker.cache import reads
from tracker.live import messages as m
from tracker.live.consumers import TrackingSocket, shown_detail
from tracker.orders import policy
from tracker.tracking import read_model, selectors
from tracker.tracking.serializers import to_json


def _since(scope: dict[str, Any]) -> int | None:
    """The version a reconnecting client has (``?since=``): a snapshot is skipped when it
    is still the order's; ValueError (4400) when it is not a number."""
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
        placed = reads.placed_order(self.order_id)  # its customer: no query, as in REST
        if placed is None or not policy.can_see(user, self.order_id, placed.customer_user_id):
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

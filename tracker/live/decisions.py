"""What the push bridge sends for each record, decided without any I/O.

Duplicates are dropped here, once, for every socket: enriched records at or below the
last version seen for an order, status events not further along than the last status
published for it, and courier points not newer than the last one published (at-least-once
re-sends, replays after a broker restart). Within one poll only the newest position-only
change of an order is sent, while every status change is sent in order.

No Kafka and no channel layer here: :class:`tracker.live.bridge.Bridge` parses records,
asks these decisions, and builds and sends the messages for the groups someone listens to.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from contract.events import (
    DeliveryLocation,
    Event,
    OrderEnriched,
    OrderStatus,
    OrderStatusChanged,
    status_rank,
)
from tracker.cache.maps import bounded
from tracker.cache.reads import scopes_of
from tracker.live.messages import (
    OPERATIONS_GROUP,
    customer_group,
    order_group,
    restaurant_group,
)

#: Orders whose last version/status the bridge remembers (bounded memory).
MAX_TRACKED_ORDERS = 200_000

#: A raw status event (or GPS point) older than this is no news: after the relay replays its
#: outbox (a broker that lost its data) a bridge that forgot those orders would otherwise
#: re-announce their whole history; snapshots and enriched updates carry it anyway.
FAST_STATUS_MAX_AGE_MS = 5 * 60 * 1000

ENDED = frozenset({OrderStatus.DELIVERED.value, OrderStatus.CANCELLED.value})
_STATUSES = frozenset(status.value for status in OrderStatus)


class Published(NamedTuple):
    """What the bridge has published for one order."""

    version: int  # the last orders_enriched version (0: none yet)
    status: str | None  # that record's status
    rank: int  # the furthest status published by either path (status_rank)


class Outgoing(NamedTuple):
    """One message to send: built from ``event`` for those of ``groups`` that listen."""

    groups: list[str]
    event: Event
    status_changed: bool = False  # an enriched update's: whether its status moved


class Routing(NamedTuple):
    """An enriched record's routing fields, read from its JSON without validating it."""

    customer_id: int
    restaurant_id: int
    version: int
    status: str


def update_groups(event: OrderEnriched, status_changed: bool) -> list[str]:
    """Where an enriched update goes: the order's, customer's and restaurant's groups, and
    the operators' when the status changed (their figures move with statuses)."""
    groups = [
        order_group(event.order_id),
        customer_group(event.customer_id),
        restaurant_group(event.restaurant_id),
    ]
    return [*groups, OPERATIONS_GROUP] if status_changed else groups


def status_groups(event: OrderStatusChanged) -> list[str]:
    """Where a raw status goes: its order's group, and its customer's and restaurant's when
    the event names them. Not the operators': their page re-reads Pinot figures on a status
    change, which only move once the enriched record is in."""
    groups = [order_group(event.order_id)]
    if event.customer_id is not None:
        groups.append(customer_group(event.customer_id))
    if event.restaurant_id is not None:
        groups.append(restaurant_group(event.restaurant_id))
    return groups


def peek_routing(value: bytes | None) -> Routing | None:
    """An enriched record's customer, restaurant, version and status, read unvalidated so a
    record nobody follows costs no validation; None when they cannot be read so (the record
    is then parsed, and refused by its value or routed by it)."""
    try:
        data = json.loads(value or b"")
        customer, restaurant = data["customer_id"], data["restaurant_id"]
        version, status = data["version"], data["status"]
    except (ValueError, TypeError, KeyError, RecursionError):  # nested too deeply: parse_event
        return None  # refuses it, and it is skipped and counted like any bad record
    if not (all(type(n) is int for n in (customer, restaurant, version)) and status in _STATUSES):
        return None
    return Routing(customer, restaurant, version, status)


class LastSeen:
    """What has been published per order, bounded: the last enriched version and status,
    the furthest status by either path, and the time of the last courier point."""

    def __init__(self, limit: int = MAX_TRACKED_ORDERS) -> None:
        self._seen = bounded(limit)  # order -> Published
        #: order -> event time of the last fast position published
        self._located = bounded(limit)
        #: order -> its newest enriched version not yet taken (:meth:`take_new_versions`)
        self._new_versions: dict[int, int] = {}
        #: list scope -> (order, version) of its newest change not yet taken
        self._new_scopes: dict[str, tuple[int, int]] = {}

    def take_new_versions(self) -> dict[int, int]:
        """The newest version of each order seen since the last call (for the register
        reads consult, :mod:`tracker.cache.reads`)."""
        taken, self._new_versions = self._new_versions, {}
        return taken

    def take_new_scopes(self) -> dict[str, tuple[int, int]]:
        """The lists (:func:`tracker.cache.reads.scopes_of`) whose orders changed since
        the last call, each with its newest change (for the register)."""
        taken, self._new_scopes = self._new_scopes, {}
        return taken

    def enriched(
        self,
        order_id: int,
        version: int,
        status: str,
        customer_id: int | None = None,
        restaurant_id: int | None = None,
    ) -> bool | None:
        """Remember an order's enriched ``version`` and ``status`` when newer than what was
        seen, and that the lists showing it changed. None when it is not newer; else
        whether its status changed."""
        last = self._seen.get(order_id)
        if last is not None and version <= last.version:
            return None  # a re-emit or replay: already published
        rank = max(status_rank(status), last.rank if last else -1)
        self._seen[order_id] = Published(version, status, rank)
        self._new_versions[order_id] = version
        for scope in scopes_of(customer_id, restaurant_id):
            self._new_scopes[scope] = (order_id, version)
        return last is None or last.status != status

    def fast_status(self, event: OrderStatusChanged, now: int) -> bool:
        """Whether a raw status change is news (and remember it): recent, and further along
        than anything published for its order. A placement (no previous status) is not: no
        client shows less than it, and the order's first enriched record introduces it."""
        if event.previous_status is None or event.event_time < now - FAST_STATUS_MAX_AGE_MS:
            return False
        rank, last = status_rank(event.status), self._seen.get(event.order_id)
        if last is not None and rank <= last.rank:
            return False  # a re-send or replay, or the stream job was quicker
        published = Published(last.version, last.status, rank) if last else Published(0, None, rank)
        self._seen[event.order_id] = published
        return True

    def fast_position(self, point: DeliveryLocation, now: int) -> bool:
        """Whether a courier's point is news (and remember it): recent, and newer than the
        last point published for its order."""
        if point.event_time < now - FAST_STATUS_MAX_AGE_MS:
            return False
        last = self._located.get(point.order_id)
        if last is not None and point.event_time <= last:
            return False  # a re-send or replay
        self._located[point.order_id] = point.event_time
        return True

    def ended(self, order_id: int) -> bool:
        """Whether the last enriched record of the order says it was delivered or cancelled."""
        seen = self._seen.get(order_id)
        return seen is not None and seen.status in ENDED


class Poll:
    """The decisions for one poll's events, taken in order, then :meth:`finish`\\ ed.

    A status (raw or enriched) is sent at once; an enriched update that only moves the
    courier waits for the end of the poll, replaced by a later one of the same order and
    dropped by a later status change (which carries the full state); a courier's newest
    point per order is sent at the end.
    """

    def __init__(self, ledger: LastSeen, now: int) -> None:
        self.ledger, self.now = ledger, now
        self.out: list[Outgoing] = []
        #: position-only enriched updates superseded within the poll
        self.coalesced = 0
        self._pending: dict[int, OrderEnriched] = {}
        self._points: dict[int, DeliveryLocation] = {}

    def take(self, event: Event) -> None:
        """Decide what one event sends (now, or at the end of the poll)."""
        if isinstance(event, OrderStatusChanged):
            if self.ledger.fast_status(event, self.now):
                self.out.append(Outgoing(status_groups(event), event))
            return
        if isinstance(event, DeliveryLocation):
            newest = self._points.get(event.order_id)
            if newest is None or event.event_time > newest.event_time:
                self._points[event.order_id] = event
            return
        assert isinstance(event, OrderEnriched)
        status_changed = self.ledger.enriched(
            event.order_id, event.version, event.status, event.customer_id, event.restaurant_id
        )
        if status_changed is None:
            return
        if event.order_id in self._pending:
            self.coalesced += 1
        if status_changed:
            self._pending.pop(event.order_id, None)
            self.out.append(Outgoing(update_groups(event, True), event, True))
        else:
            self._pending[event.order_id] = event

    def finish(self) -> tuple[list[Outgoing], list[DeliveryLocation]]:
        """Everything the poll sends, in order, and the couriers' points that are news for
        the operators' fleet (not the late point of a finished ride)."""
        out = self.out + [Outgoing(update_groups(e, False), e) for e in self._pending.values()]
        fleet = []
        for point in self._points.values():
            if self.ledger.fast_position(point, self.now):
                out.append(Outgoing([order_group(point.order_id)], point))
                if not self.ledger.ended(point.order_id):
                    fleet.append(point)
        return out, fleet

"""From Kafka to WebSockets: fan ``order_statuses``, ``delivery_locations`` and
``orders_enriched`` out to groups.

Three paths, three readers (:data:`tracker.live.reader.READERS`):

* **Fast status** (``order_statuses``, the outbox relay's raw events): a status
  change is pushed as a ``status`` message the moment its event exists, seconds
  before the stream job's micro-batch joins it. It carries the new status only,
  and no version (versions are the stream job's); clients apply it only when it
  is further along the lifecycle than what they show.
* **Fast position** (``delivery_locations``, the couriers' raw GPS points): each
  point is pushed as a ``position`` message to its order's group only (the point
  names no customer or restaurant, and only the order's own sockets may see where
  its courier is). Within one poll only an order's newest point is sent. The same
  points feed the operators' fleet (:mod:`tracker.live.fleet`).
* **Full state** (``orders_enriched``): each record is the order's full state at a
  version, so a client that gets only the latest record loses nothing. The bridge
  therefore coalesces: within one poll, only the newest position-only change of an
  order is published, while every status change is published in order.

What each record sends, deduplicated once for every socket, is decided in
:mod:`tracker.live.decisions`; this module parses, builds the messages for the
groups someone listens to, and publishes them.

Two ways to run it (``PUSH_BRIDGE_EMBEDDED``):

* embedded (default): a thread inside the ASGI process publishing to the
  in-memory channel layer on the server's event loop (:mod:`tracker.live.embedded`);
* production: ``manage.py pushbridge``, a worker publishing through
  channels-redis, so any number of ASGI servers receive the updates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from contract.events import (
    DeliveryLocation,
    Event,
    EventValidationError,
    OrderEnriched,
    OrderStatusChanged,
    Topic,
    now_ms,
    parse_event,
    topic_name,
)
from tracker.live.decisions import LastSeen, Outgoing, Poll, peek_routing
from tracker.live.fleet import Fleet
from tracker.live.messages import (
    OPERATIONS_GROUP,
    customer_group,
    order_group,
    position_from_event,
    restaurant_group,
    status_from_event,
    update_from_enriched,
)

log = logging.getLogger(__name__)

#: Sends (group, message) pairs to the channel layer, in order, before returning.
Publish = Callable[[list[tuple[str, dict[str, Any]]]], None]

#: Whether a group has a member now. The in-process bridge knows (its channel layer is
#: in this process), so it builds no message nobody would receive; through Redis it
#: cannot ask cheaply, so every group counts as listening.
Listening = Callable[[str], bool]


class Bridge:
    """Publishes each status change as soon as its raw event exists, and each new
    orders_enriched version, to its order's, customer's and restaurant's groups (and
    enriched status changes to the operators' group).

    Deduplicating and coalescing here, once, means every socket gets the same
    gap-free, in-order stream without each one keeping per-order state.
    """

    def __init__(self, publish: Publish, listening: Listening | None = None) -> None:
        self.publish = publish
        self.listening: Listening = listening or (lambda group: True)
        self.ledger = LastSeen()
        self.fleet = Fleet()
        #: The fleet's clock (monotonic seconds): how often each courier is sent.
        self.clock: Callable[[], float] = time.monotonic
        self._locations = topic_name(Topic.DELIVERY_LOCATIONS)
        self._routed = {self._locations, topic_name(Topic.ORDERS_ENRICHED)}
        self.published = 0
        self.coalesced = 0
        #: Records skipped (invalid, or failing to be handled), by reason.
        self.skipped: Counter[str] = Counter()
        #: The readers' threads take turns to change the state above; each publishes
        #: what it decided outside it, so a status never waits for another reader's
        #: sends to get through a busy event loop or Redis. Their messages may cross:
        #: clients keep the furthest status, the highest version and the newest point.
        self._handling = threading.Lock()

    def take_new_versions(self) -> dict[int, int]:
        """The orders_enriched versions seen since the last call (:class:`LastSeen`)."""
        with self._handling:
            return self.ledger.take_new_versions()

    def take_new_scopes(self) -> dict[str, tuple[int, int]]:
        """The lists changed since the last call (:class:`LastSeen`)."""
        with self._handling:
            return self.ledger.take_new_scopes()

    def handle(self, records: list[tuple[Topic, bytes]], *, fleet: bool) -> None:
        """Publish one poll's (topic, value) records, and with ``fleet`` the fleet entries
        that have waited out their interval (an empty poll sends just those), in one call
        to ``publish``: one hop to the event loop or one Redis round of sends per poll.

        Parse, then decide under the lock, then publish after it. Parsing stays outside
        (a poll holds up to a thousand records, each validated), so a status never waits
        for another reader's poll to be parsed. Only one reader sends the fleet
        (``fleet``), so its messages (a courier's point, then its ride's end) keep their
        order."""
        events = [event for event in map(self._parse, records) if event is not None]
        with self._handling:
            sends = self._sends(events)
            if fleet:
                self._fleet(sends)
        if sends:
            self.publish(sends)

    def worth_parsing(self, topic: str, key: bytes | None, value: bytes | None = None) -> bool:
        """Whether a record is worth parsing (validating is most of the bridge's work): a
        courier's point or an enriched record only when a group it would go to listens, or
        the operators' group (the fleet follows every ride). The key is the order id; an
        enriched record's customer and restaurant are read from its JSON unvalidated, and
        when it is not parsed its version and status are still remembered, so an order
        first watched mid-way is not re-announced as a status change. Every web process
        reads every record, and most are of orders no socket of its follows
        (docs/performance.md). A record that cannot be routed so is parsed, and refused
        by its value or routed by it."""
        if topic not in self._routed or key is None:
            return True
        try:
            order_id = int(key)
        except ValueError:
            return True
        if self.listening(OPERATIONS_GROUP) or self.listening(order_group(order_id)):
            return True
        if topic == self._locations:
            return False
        routing = peek_routing(value)
        if routing is None:
            return True
        if self.listening(customer_group(routing.customer_id)) or self.listening(
            restaurant_group(routing.restaurant_id)
        ):
            return True
        with self._handling:
            self.ledger.enriched(
                order_id,
                routing.version,
                routing.status,
                routing.customer_id,
                routing.restaurant_id,
            )
        return False

    def _parse(self, record: tuple[Topic, bytes]) -> Event | None:
        """One record's event, or None (counted and logged) when it is not valid."""
        topic, value = record
        try:
            return parse_event(topic, value)
        except EventValidationError as exc:
            with self._handling:
                self.skipped[f"invalid {exc.field}"] += 1
            log.warning("push bridge: skipping an invalid %s record: %s", topic, exc)
            return None

    def _sends(self, events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
        """What one poll's events make the bridge send; the fleet follows along."""
        poll = Poll(self.ledger, now_ms())
        for event in events:
            try:
                if isinstance(event, OrderEnriched):
                    self.fleet.follow(event)
                poll.take(event)
            except Exception as exc:  # noqa: BLE001 - one record must not stop every socket
                self._skip(event, exc)
        outgoing, moved = poll.finish()
        self.coalesced += poll.coalesced
        self.fleet.moved(moved)
        sends: list[tuple[str, dict[str, Any]]] = []
        for out in outgoing:
            try:
                self._send_to_listeners(sends, out)
            except Exception as exc:  # noqa: BLE001 - one record must not stop every socket
                self._skip(out.event, exc)
        return sends

    def _skip(self, event: Event, exc: Exception) -> None:
        """Count and log an event that failed to be handled (called in its except block)."""
        self.skipped[type(exc).__name__] += 1
        log.exception("push bridge: skipping a %s it could not handle", type(event).__name__)

    def _send_to_listeners(self, sends: list[tuple[str, dict[str, Any]]], out: Outgoing) -> None:
        """Send the message for ``out`` to those of its groups someone listens to; when
        none does, build nothing."""
        listened = [group for group in out.groups if self.listening(group)]
        if listened:
            message = _message(out)
            sends.extend((group, message) for group in listened)
            self.published += 1

    def _fleet(self, sends: list[tuple[str, dict[str, Any]]]) -> None:
        """The fleet's message, when an operator watches and it has news."""
        if not self.listening(OPERATIONS_GROUP):
            self.fleet.forget_pending()
            return
        message = self.fleet.message(self.clock())
        if message is not None:
            sends.append((OPERATIONS_GROUP, message))


def _message(out: Outgoing) -> dict[str, Any]:
    """The message an event makes: a fast status, a courier's point or an update."""
    if isinstance(out.event, OrderStatusChanged):
        return status_from_event(out.event)
    if isinstance(out.event, DeliveryLocation):
        return position_from_event(out.event)
    assert isinstance(out.event, OrderEnriched)
    return update_from_enriched(out.event, out.status_changed)


async def send_in_order(channel_layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> None:
    """Send each update to its group, one after the other.

    One at a time: with channels-redis a group_send awaits the network, and sends left
    running side by side reach Redis out of order (a socket then drops the older version
    as stale: a lost status).
    """
    for group, message in sends:
        await channel_layer.group_send(group, {"type": "order.update", "payload": message})

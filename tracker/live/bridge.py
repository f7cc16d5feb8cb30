"""From Kafka to WebSockets: fan ``order_statuses``, ``delivery_locations`` and
``orders_enriched`` out to groups.

Three paths, three readers (:data:`READERS`):

* **Fast status** (``order_statuses``, the outbox relay's raw events): a status
  change is pushed as a ``status`` message the moment its event exists, seconds
  before the stream job's micro-batch joins it. It carries the new status only,
  and no version (versions are the stream job's); clients apply it only when it
  is further along the lifecycle than what they show.
* **Fast position** (``delivery_locations``, the couriers' raw GPS points): each
  point is pushed as a ``position`` message to its order's group only (the point
  names no customer or restaurant, and only the order's own sockets may see where
  its courier is). Within one poll only an order's newest point is sent. The same
  points feed the operators' **fleet**: one ``fleet`` message a second at most,
  each courier in it at most once, with how late its order runs against the
  arrival predicted at pickup (:func:`tracker.tracking.eta.running_late_seconds`).
* **Full state** (``orders_enriched``): each record is the order's full state at a
  version, so a client that gets only the latest record loses nothing. The bridge
  therefore coalesces: within one poll, only the newest position-only change of an
  order is published, while every status change is published in order.

Duplicates are dropped here, once, for every socket: enriched records at or below
the last version seen for an order, and status events not further along than the
last status published for it (at-least-once re-sends, replays after a broker
restart).

Two ways to run it (``PUSH_BRIDGE_EMBEDDED``):

* embedded (default): a thread inside the ASGI process publishing to the
  in-memory channel layer on the server's event loop;
* production: ``manage.py pushbridge``, a worker publishing through
  channels-redis, so any number of ASGI servers receive the updates.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from channels.layers import InMemoryChannelLayer
from confluent_kafka import KafkaError, TopicPartition
from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge, Histogram

from contract.events import (
    IN_TRANSIT_STATUSES,
    DeliveryLocation,
    Event,
    EventValidationError,
    OrderEnriched,
    OrderStatus,
    OrderStatusChanged,
    Topic,
    now_ms,
    parse_event,
    status_rank,
    topic_name,
)
from contract.geo import haversine_km
from runtime import kafka
from runtime.positions import PositionReporter
from tracker.live.messages import (
    OPERATIONS_GROUP,
    customer_group,
    fleet_message,
    order_group,
    position_from_event,
    restaurant_group,
    status_from_event,
    update_from_enriched,
)
from tracker.tracking import eta
from tracker.tracking.formats import iso_ms

log = logging.getLogger(__name__)

BRIDGE_DELAY = Gauge(
    "ordertrack_push_bridge_delay_seconds",
    "Age of the newest record the push bridge handled from each topic (0 when caught up)",
    ["topic"],
    multiprocess_mode="livemax",
)
BRIDGE_RECORDS = MetricCounter(
    "ordertrack_push_bridge_records_total", "Records the push bridge consumed", ["topic"]
)
_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BRIDGE_RECORD_AGE = Histogram(
    "ordertrack_push_bridge_record_age_seconds",
    "How old each record was when the push bridge received it, from its timestamp (a "
    "status: the relay's produce; a GPS point: the courier's fix)",
    ["topic"],
    buckets=_SECONDS,
)
BRIDGE_HANDLE = Histogram(
    "ordertrack_push_bridge_handle_seconds",
    "Time from a poll's records to their messages accepted by the channel layer",
    ["topic"],
    buckets=_SECONDS,
)

#: Sends (group, message) pairs to the channel layer, in order, before returning.
Publish = Callable[[list[tuple[str, dict[str, Any]]]], None]

#: Whether a group has a member now. The in-process bridge knows (its channel layer is
#: in this process), so it builds no message nobody would receive; through Redis it
#: cannot ask cheaply, so every group counts as listening.
Listening = Callable[[str], bool]

#: The topics the bridge follows, each reader (a consumer and its thread) its own.
#: Each topic is read alone, so a burst on one (a fleet's GPS points, a replay of
#: enriched records) never queues another's records (statuses) behind it.
READERS = ((Topic.ORDER_STATUSES,), (Topic.DELIVERY_LOCATIONS,), (Topic.ORDERS_ENRICHED,))

#: Orders whose last version/status the bridge remembers (bounded memory).
MAX_TRACKED_ORDERS = 200_000

#: A raw status event (or GPS point) older than this is no news: after the relay replays its outbox
#: (a broker that lost its data) a bridge that forgot those orders would otherwise
#: re-announce their whole history; snapshots and enriched updates carry it anyway.
FAST_STATUS_MAX_AGE_MS = 5 * 60 * 1000

#: The operators' fleet map gets each courier at most this often (seconds).
FLEET_INTERVAL_SECONDS = 1.0

#: Couriers the fleet remembers (bounded memory; a courier reports every few seconds).
MAX_TRACKED_COURIERS = 50_000


_ENDED = frozenset({OrderStatus.DELIVERED.value, OrderStatus.CANCELLED.value})
_STATUSES = frozenset(status.value for status in OrderStatus)


class _Trip(NamedTuple):
    """An order on the road, as its last enriched record described it (for the fleet)."""

    trip: eta.Trip
    picked_up_at: int
    promised: int | None  # the arrival predicted at pickup (epoch ms)


class _Published(NamedTuple):
    """What the bridge has published for one order."""

    version: int  # the last orders_enriched version (0: none yet)
    status: str | None  # that record's status
    rank: int  # the furthest status published by either path (status_rank)


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
        self._seen: OrderedDict[int, _Published] = OrderedDict()
        #: order -> event time of the last fast position published
        self._located: OrderedDict[int, int] = OrderedDict()
        #: order -> its trip, while it is on the road
        self._trips: OrderedDict[int, _Trip] = OrderedDict()
        #: courier -> its newest point not sent to the fleet yet; when it was last sent
        self._fleet_due: dict[int, DeliveryLocation] = {}
        self._fleet_sent: OrderedDict[int, float] = OrderedDict()
        self._fleet_orders: dict[int, int] = {}  # courier -> the order it last carried
        self._fleet_gone: list[int] = []
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
        """What one poll's events make the bridge send."""
        sends: list[tuple[str, dict[str, Any]]] = []
        pending_positions: dict[int, OrderEnriched] = {}
        points: dict[int, DeliveryLocation] = {}
        for event in events:
            try:
                self._handle_event(event, sends, pending_positions, points)
            except Exception as exc:  # noqa: BLE001 - one record must not stop every socket
                self.skipped[type(exc).__name__] += 1
                log.exception(
                    "push bridge: skipping a %s it could not handle", type(event).__name__
                )
        for event in pending_positions.values():
            self._send_to_listeners(
                sends, _update_groups(event, False), lambda e=event: update_from_enriched(e, False)
            )
        for point in points.values():
            self._fast_position(sends, point)
        return sends

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
        try:
            data = json.loads(value or b"")
            customer, restaurant = data["customer_id"], data["restaurant_id"]
            version, status = data["version"], data["status"]
        except (ValueError, TypeError, KeyError, RecursionError):  # nested too deeply: parse_event
            return True  # refuses it, and it is skipped and counted like any bad record
        if not (
            all(type(n) is int for n in (customer, restaurant, version)) and status in _STATUSES
        ):
            return True
        if self.listening(customer_group(customer)) or self.listening(restaurant_group(restaurant)):
            return True
        with self._handling:
            self._seen_version(order_id, version, status)
        return False

    def _seen_version(self, order_id: int, version: int, status: str) -> bool | None:
        """Remember an order's enriched ``version`` and ``status`` when newer than what was
        seen. None when it is not newer; else whether its status changed."""
        last = self._seen.get(order_id)
        if last is not None and version <= last.version:
            return None  # a re-emit or replay: already published
        rank = max(status_rank(status), last.rank if last else -1)
        self._remember(order_id, _Published(version, status, rank))
        return last is None or last.status != status

    def _handle_event(
        self,
        event: Event,
        sends: list[tuple[str, dict[str, Any]]],
        pending_positions: dict[int, OrderEnriched],
        points: dict[int, DeliveryLocation],
    ) -> None:
        """One event of a poll: a fast status, a courier's point (the newest per order
        waits for the end of the poll), or an enriched update (pending when it only
        moves the courier, so a later one of the same order replaces it)."""
        if isinstance(event, OrderStatusChanged):
            self._fast_status(sends, event)
            return
        if isinstance(event, DeliveryLocation):
            newest = points.get(event.order_id)
            if newest is None or event.event_time > newest.event_time:
                points[event.order_id] = event
            return
        assert isinstance(event, OrderEnriched)
        self._follow_trip(event)
        status_changed = self._seen_version(event.order_id, event.version, event.status)
        if status_changed is None:
            return
        if event.order_id in pending_positions:
            self.coalesced += 1
        if status_changed:
            # The status message carries the full state, newer than any pending position.
            pending_positions.pop(event.order_id, None)
            self._send_to_listeners(
                sends, _update_groups(event, True), lambda: update_from_enriched(event, True)
            )
        else:
            pending_positions[event.order_id] = event

    def _fast_status(
        self, sends: list[tuple[str, dict[str, Any]]], event: OrderStatusChanged
    ) -> None:
        """Publish a raw status change once, if it moves the order further than anything
        published for it. A placement (no previous status) is skipped: no client shows
        less than it, and the order's first enriched record introduces it to lists."""
        if event.previous_status is None or event.event_time < now_ms() - FAST_STATUS_MAX_AGE_MS:
            return
        rank, last = status_rank(event.status), self._seen.get(event.order_id)
        if last is not None and rank <= last.rank:
            return  # a re-send or replay, or the stream job was quicker
        self._remember(
            event.order_id,
            _Published(last.version, last.status, rank) if last else _Published(0, None, rank),
        )
        # Not to the operators' group: its page re-reads Pinot figures on a status change,
        # which only move once the enriched record is in.
        groups = [order_group(event.order_id)]
        if event.customer_id is not None:
            groups.append(customer_group(event.customer_id))
        if event.restaurant_id is not None:
            groups.append(restaurant_group(event.restaurant_id))
        self._send_to_listeners(sends, groups, lambda: status_from_event(event))

    def _fast_position(
        self, sends: list[tuple[str, dict[str, Any]]], point: DeliveryLocation
    ) -> None:
        """Publish a courier's point to its order's sockets, once, if it is newer than
        the last one published for that order; and queue it for the fleet."""
        if point.event_time < now_ms() - FAST_STATUS_MAX_AGE_MS:
            return
        last = self._located.get(point.order_id)
        if last is not None and point.event_time <= last:
            return  # a re-send or replay
        _bounded_put(self._located, point.order_id, point.event_time, MAX_TRACKED_ORDERS)
        self._send_to_listeners(
            sends, [order_group(point.order_id)], lambda: position_from_event(point)
        )
        seen = self._seen.get(point.order_id)
        if seen is None or seen.status not in _ENDED:  # a late point of a finished ride
            self._fleet_due[point.courier_id] = point
            self._fleet_orders[point.courier_id] = point.order_id

    def _fleet_entry(self, point: DeliveryLocation) -> dict[str, Any]:
        """One courier on the fleet map: where, for which order, and how late it runs."""
        on_road = self._trips.get(point.order_id)
        late = None
        if on_road is not None and on_road.promised is not None:
            here = dataclasses.replace(
                on_road.trip,
                courier=(point.lat, point.lon),
                distance_left_km=haversine_km(point.lat, point.lon, *on_road.trip.destination),
            )
            late = eta.running_late_seconds(
                here, eta.current_statistics(), now_ms(), on_road.promised
            )
        return {
            "courier_id": point.courier_id,
            "order_id": point.order_id,
            "lat": point.lat,
            "lon": point.lon,
            "at": iso_ms(point.event_time),
            "late_seconds": late,
        }

    def _follow_trip(self, event: OrderEnriched) -> None:
        """Keep what the fleet needs of an order on the road; forget it once delivered."""
        if event.status in IN_TRANSIT_STATUSES and event.out_for_delivery_at is not None:
            known = self._trips.get(event.order_id)
            trip = eta.Trip.of_enriched(event)
            if known is not None and known.picked_up_at == event.out_for_delivery_at:
                promised = known.promised
            else:
                promised = eta.promised_arrival(
                    trip, eta.current_statistics(), event.out_for_delivery_at
                )
            _bounded_put(
                self._trips,
                event.order_id,
                _Trip(trip, event.out_for_delivery_at, promised),
                MAX_TRACKED_ORDERS,
            )
        elif event.status in _ENDED:
            self._trips.pop(event.order_id, None)
            courier = event.courier_id
            if courier is not None and self._fleet_orders.get(courier) == event.order_id:
                del self._fleet_orders[courier]
                self._fleet_due.pop(courier, None)
                self._fleet_gone.append(courier)

    def _fleet(self, sends: list[tuple[str, dict[str, Any]]]) -> None:
        """The couriers whose interval has passed, and those whose delivery ended, to the
        operators' group in one message."""
        if not self.listening(OPERATIONS_GROUP):
            # Nobody watches the fleet: its entries (a prediction each) would go nowhere.
            # An operator who opens the map sees each courier at its next point.
            self._fleet_due.clear()
            self._fleet_gone = []
            return
        now = self.clock()
        due = [
            courier
            for courier in self._fleet_due
            if now - self._fleet_sent.get(courier, -FLEET_INTERVAL_SECONDS)
            >= FLEET_INTERVAL_SECONDS
        ]
        if not due and not self._fleet_gone:
            return
        couriers = [self._fleet_entry(self._fleet_due.pop(courier)) for courier in due]
        for courier in due:
            _bounded_put(self._fleet_sent, courier, now, MAX_TRACKED_COURIERS)
        sends.append((OPERATIONS_GROUP, fleet_message(couriers, self._fleet_gone)))
        self._fleet_gone = []

    def _remember(self, order_id: int, published: _Published) -> None:
        _bounded_put(self._seen, order_id, published, MAX_TRACKED_ORDERS)

    def _send_to_listeners(
        self,
        sends: list[tuple[str, dict[str, Any]]],
        groups: list[str],
        build: Callable[[], dict[str, Any]],
    ) -> None:
        """Send the message ``build`` makes to those of ``groups`` someone listens to; when
        none does, build nothing."""
        listened = [group for group in groups if self.listening(group)]
        if listened:
            message = build()
            sends.extend((group, message) for group in listened)
            self.published += 1

    def run(self, stop: threading.Event, ready: threading.Event | None = None) -> None:
        """Follow every topic from its end until ``stop``: one reader per :data:`READERS`
        entry, each in its own thread, reconnecting by itself.

        ``ready`` is set once every reader's start offsets are fixed: every record
        produced after that moment will be published (what came before is in the
        snapshot). Positions are reported to the broker for pipeline health
        (:mod:`runtime.positions`).
        """
        readies = [threading.Event() for _ in READERS]
        threads = [
            threading.Thread(
                target=self._follow,
                args=(topics, f"bridge-{os.getpid()}-{index}", stop, started),
                name=f"push-bridge-{index}",
                daemon=True,
            )
            for index, (topics, started) in enumerate(zip(READERS, readies, strict=True))
        ]
        for thread in threads:
            thread.start()
        while not stop.is_set() and not all(started.wait(0.1) for started in readies):
            pass
        if ready is not None and not stop.is_set():
            ready.set()
        for thread in threads:
            thread.join()

    def _follow(
        self, topics: tuple[Topic, ...], reader: str, stop: threading.Event, ready: threading.Event
    ) -> None:
        """One reader: ``topics`` in one consumer, from their end, until ``stop``."""
        names = {topic_name(topic): topic for topic in topics}
        fleet = Topic.DELIVERY_LOCATIONS in topics
        ages = {name: BRIDGE_RECORD_AGE.labels(name) for name in names}
        handled = BRIDGE_HANDLE.labels(",".join(names))
        reporter = PositionReporter(reader)  # one per reader of each ASGI worker process
        #: (topic, partition) -> next offset
        positions: dict[tuple[str, int], int] = {}
        while not stop.is_set():
            cons = kafka.consumer()
            try:
                if not positions:
                    # Start at the end, resolved now rather than lazily, so no record
                    # slips between ready and the first fetch.
                    positions = {
                        (name, partition): offset
                        for name in names
                        for partition, offset in kafka.end_offsets(cons, name).items()
                    }
                cons.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
                ready.set()
                log.info("push bridge: following %s", ", ".join(names))
                while not stop.is_set():
                    if reporter.due():
                        reporter.report(_by_topic(positions))
                    # poll() returns as soon as one record is there; consume(timeout=0)
                    # then drains what is buffered without waiting (consume alone
                    # would wait its whole timeout for a batch that is not full).
                    first = cons.poll(0.1)
                    batch = [first, *cons.consume(999, timeout=0)] if first is not None else []
                    records = []
                    seen = {name: [0, 0] for name in names}  # topic -> [records, newest ms]
                    received = now_ms()
                    for msg in batch:
                        err = msg.error()
                        if err is None:
                            topic, stamp, value = msg.topic(), msg.timestamp()[1], msg.value()
                            ages[topic].observe(max(0, received - stamp) / 1000)
                            if self.worth_parsing(topic, msg.key(), value):
                                records.append((names[topic], value))
                            positions[(topic, msg.partition())] = msg.offset() + 1
                            mine = seen[topic]
                            mine[0], mine[1] = mine[0] + 1, max(mine[1], stamp)
                        elif err.code() != KafkaError._PARTITION_EOF:
                            log.warning("push bridge: %s", err)
                    started = time.perf_counter()
                    self.handle(records, fleet=fleet)
                    if records:
                        handled.observe(time.perf_counter() - started)
                    _measure(seen, len(batch) < 1000)
            except Exception:  # noqa: BLE001 - the bridge must outlive broker restarts
                log.exception("push bridge: consumer failed; reconnecting in 1s")
                stop.wait(1.0)
            finally:
                cons.close()
        reporter.close()


def _update_groups(event: OrderEnriched, status_changed: bool) -> list[str]:
    """Where an enriched update goes: the order's, customer's and restaurant's groups, and
    the operators' when the status changed (their figures move with statuses)."""
    groups = [
        order_group(event.order_id),
        customer_group(event.customer_id),
        restaurant_group(event.restaurant_id),
    ]
    return [*groups, OPERATIONS_GROUP] if status_changed else groups


def _measure(seen: dict[str, list[int]], drained: bool) -> None:
    """The delay gauges: how old the newest record handled is; 0 once the poll came back
    short (caught up) with nothing from that topic."""
    now = now_ms()
    for topic, (count, stamp) in seen.items():
        if count:
            BRIDGE_RECORDS.labels(topic).inc(count)
            BRIDGE_DELAY.labels(topic).set(max(0.0, (now - stamp) / 1000))
        elif drained:
            BRIDGE_DELAY.labels(topic).set(0.0)


def _bounded_put(table: OrderedDict, key: Any, value: Any, limit: int) -> None:
    """Put ``key`` last in ``table``, forgetting the oldest key beyond ``limit``."""
    table[key] = value
    table.move_to_end(key)
    if len(table) > limit:
        table.popitem(last=False)


def _by_topic(positions: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in positions.items():
        out.setdefault(topic, {})[partition] = offset
    return out


async def send_in_order(channel_layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> None:
    """Send each update to its group, one after the other.

    One at a time: with channels-redis a group_send awaits the network, and sends left
    running side by side reach Redis out of order (a socket then drops the older version
    as stale: a lost status).
    """
    for group, message in sends:
        await channel_layer.group_send(group, {"type": "order.update", "payload": message})


_embedded_lock = threading.Lock()
_embedded: tuple[tuple[Any, str], threading.Thread, threading.Event, threading.Event] | None = None


def ensure_embedded_bridge(loop: asyncio.AbstractEventLoop, channel_layer: Any) -> threading.Event:
    """Run the in-process bridge, publishing on ``loop`` (the ASGI server's event loop).

    One per process; started again if the loop or the topic changed (a restarted
    server loop, or tests that give each case its own topic prefix).
    """
    global _embedded
    key = (loop, topic_name(Topic.ORDERS_ENRICHED))
    with _embedded_lock:
        if _embedded is not None:
            running_key, thread, stop, ready = _embedded
            if running_key == key and thread.is_alive():
                return ready
            stop.set()

        def publish(sends: list[tuple[str, dict[str, Any]]]) -> None:
            if loop.is_closed():
                return
            sent = asyncio.run_coroutine_threadsafe(send_in_order(channel_layer, sends), loop)
            # Wait for the whole batch, however long a busy loop takes: a next batch sent
            # beside it could overtake it (a socket then drops the older version as stale).
            while True:
                try:
                    sent.result(timeout=5)
                    return
                except concurrent.futures.TimeoutError:
                    if loop.is_closed():
                        return
                    log.warning("push bridge: %d pushes waiting on a busy loop", len(sends))
                except Exception:  # noqa: BLE001 - a failed push must not stop the bridge
                    log.exception("push bridge: %d pushes failed", len(sends))
                    return

        stop, ready = threading.Event(), threading.Event()
        listening = None
        if isinstance(channel_layer, InMemoryChannelLayer):  # its groups say who listens
            groups = channel_layer.groups
            listening = lambda group: bool(groups.get(group))  # noqa: E731
        thread = threading.Thread(
            target=Bridge(publish, listening).run,
            args=(stop, ready),
            name="push-bridge",
            daemon=True,
        )
        thread.start()
        _embedded = (key, thread, stop, ready)
        return ready


def stop_embedded_bridge(timeout: float = 5.0) -> None:
    """Stop the in-process bridge (server shutdown, end of a test session)."""
    global _embedded
    with _embedded_lock:
        if _embedded is None:
            return
        _, thread, stop, _ = _embedded
        stop.set()
        _embedded = None
    thread.join(timeout)

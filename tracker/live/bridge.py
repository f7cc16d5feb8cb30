"""From Kafka to WebSockets: fan ``order_statuses`` and ``orders_enriched`` out to groups.

Two paths, one consumer:

* **Fast status** (``order_statuses``, the outbox relay's raw events): a status
  change is pushed as a ``status`` message the moment its event exists, seconds
  before the stream job's micro-batch joins it. It carries the new status only,
  and no version (versions are the stream job's); clients apply it only when it
  is further along the lifecycle than what they show.
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
import logging
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, TopicPartition
from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge

from contract import kafka
from contract.events import (
    EventValidationError,
    OrderEnriched,
    OrderStatusChanged,
    Topic,
    now_ms,
    parse_event,
    status_rank,
    topic_name,
)
from contract.positions import PositionReporter, RolloverLog, topic_ids
from tracker.live.messages import (
    OPERATIONS_GROUP,
    customer_group,
    order_group,
    restaurant_group,
    status_from_event,
    update_from_enriched,
)

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

#: Sends (group, message) pairs to the channel layer, in order, before returning.
Publish = Callable[[list[tuple[str, dict[str, Any]]]], None]

#: The topics the bridge follows, read by one consumer in poll order.
TOPICS = (Topic.ORDER_STATUSES, Topic.ORDERS_ENRICHED)

#: Orders whose last version/status the bridge remembers (bounded memory).
MAX_TRACKED_ORDERS = 200_000

#: A raw status event older than this is no news: after the relay replays its outbox
#: (a broker that lost its data) a bridge that forgot those orders would otherwise
#: re-announce their whole history; snapshots and enriched updates carry it anyway.
FAST_STATUS_MAX_AGE_MS = 5 * 60 * 1000


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

    def __init__(self, publish: Publish) -> None:
        self.publish = publish
        self._seen: OrderedDict[int, _Published] = OrderedDict()
        self.published = 0
        self.coalesced = 0
        #: Records skipped (invalid, or failing to be handled), by reason.
        self.skipped: Counter[str] = Counter()

    def handle_batch(self, records: list[tuple[Topic, bytes]]) -> None:
        """Publish one poll's worth of (topic, value) records, in one call to ``publish``
        (one hop to the event loop or one Redis round of sends per poll, not per group)."""
        sends: list[tuple[str, dict[str, Any]]] = []
        pending_positions: dict[int, dict[str, Any]] = {}
        for topic, value in records:
            try:
                self._take(topic, value, sends, pending_positions)
            except EventValidationError as exc:
                self.skipped[f"invalid {exc.field}"] += 1
                log.warning("push bridge: skipping an invalid %s record: %s", topic, exc)
            except Exception as exc:  # noqa: BLE001 - one record must not stop every socket
                self.skipped[type(exc).__name__] += 1
                log.exception("push bridge: skipping a %s record it could not handle", topic)
        for message in pending_positions.values():
            self._add(sends, message)
        if sends:
            self.publish(sends)

    def _take(
        self,
        topic: Topic,
        value: bytes,
        sends: list[tuple[str, dict[str, Any]]],
        pending_positions: dict[int, dict[str, Any]],
    ) -> None:
        """One record of a poll: a fast status, or an enriched update (pending when it
        only moves the courier, so a later one of the same order replaces it)."""
        event = parse_event(topic, value)
        if isinstance(event, OrderStatusChanged):
            self._fast_status(sends, event)
            return
        assert isinstance(event, OrderEnriched)
        last = self._seen.get(event.order_id)
        if last is not None and event.version <= last.version:
            return  # a re-emit or replay: already published
        status_changed = last is None or last.status != event.status
        rank = max(status_rank(event.status), last.rank if last else -1)
        self._remember(event.order_id, _Published(event.version, event.status, rank))
        message = update_from_enriched(event, status_changed)
        if status_changed:
            # The status message carries the full state, newer than any pending position.
            if pending_positions.pop(event.order_id, None) is not None:
                self.coalesced += 1
            self._add(sends, message)
        else:
            if event.order_id in pending_positions:
                self.coalesced += 1
            pending_positions[event.order_id] = message

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
        message = status_from_event(event)
        # Not to the operators' group: its page re-reads Pinot figures on a status change,
        # which only move once the enriched record is in.
        sends.append((order_group(event.order_id), message))
        if event.customer_id is not None:
            sends.append((customer_group(event.customer_id), message))
        if event.restaurant_id is not None:
            sends.append((restaurant_group(event.restaurant_id), message))
        self.published += 1

    def _remember(self, order_id: int, published: _Published) -> None:
        self._seen[order_id] = published
        self._seen.move_to_end(order_id)
        if len(self._seen) > MAX_TRACKED_ORDERS:
            self._seen.popitem(last=False)

    def _add(self, sends: list[tuple[str, dict[str, Any]]], message: dict[str, Any]) -> None:
        sends.append((order_group(message["order_id"]), message))
        sends.append((customer_group(message["customer_id"]), message))
        sends.append((restaurant_group(message["restaurant_id"]), message))
        if message["kind"] == "status":  # the operators' figures move with statuses
            sends.append((OPERATIONS_GROUP, message))
        self.published += 1

    def run(self, stop: threading.Event, ready: threading.Event | None = None) -> None:
        """Consume from the end of both topics until ``stop``; reconnects by itself.

        ``ready`` is set once the start offsets are fixed: every record produced
        after that moment will be published (what came before is in the snapshot).
        Positions are reported to the broker, and a rollover of the embedded broker
        moves them to the same records in its new log (:mod:`contract.positions`).
        """
        names = {topic_name(topic): topic for topic in TOPICS}
        rollovers = RolloverLog()
        reporter = PositionReporter(f"bridge-{os.getpid()}")  # one per ASGI worker process
        rollovers.changed()
        #: (topic, partition) -> next offset, in the incarnations ``ids`` name
        positions: dict[tuple[str, int], int] = {}
        ids: dict[str, str] = {}
        while not stop.is_set():
            cons = kafka.consumer()
            try:
                if not positions:
                    # Start at the true end (Tansu's watermark under-reports), resolved now
                    # rather than lazily, so no record slips between ready and first fetch.
                    # (end_offsets replaces the assignment: collect both, then assign.)
                    ids = topic_ids(reporter.admin, list(names))
                    positions = {
                        (name, partition): offset
                        for name in names
                        for partition, offset in kafka.end_offsets(cons, name).items()
                    }
                cons.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
                if ready is not None:
                    ready.set()
                log.info("push bridge: following %s", ", ".join(names))
                while not stop.is_set():
                    if reporter.due():
                        _report(reporter, ids, positions)
                    # poll() returns as soon as one record is there; consume(timeout=0)
                    # then drains what is buffered without waiting (consume alone
                    # would wait its whole timeout for a batch that is not full).
                    first = cons.poll(0.1)
                    batch = [first, *cons.consume(999, timeout=0)] if first is not None else []
                    if rollovers.changed():
                        # Some of these may come from the new log at shifted offsets.
                        ids = _follow_rollover(rollovers, reporter, ids, positions)
                        cons.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
                        continue
                    records = []
                    seen = {name: [0, 0] for name in names}  # topic -> [records, newest ms]
                    for msg in batch:
                        err = msg.error()
                        if err is None:
                            records.append((names[msg.topic()], msg.value()))
                            positions[(msg.topic(), msg.partition())] = msg.offset() + 1
                            mine = seen[msg.topic()]
                            mine[0], mine[1] = mine[0] + 1, max(mine[1], msg.timestamp()[1])
                        elif err.code() != KafkaError._PARTITION_EOF:
                            log.warning("push bridge: %s", err)
                    if records:
                        self.handle_batch(records)
                    _measure(seen, len(batch) < 1000)
            except Exception:  # noqa: BLE001 - the bridge must outlive broker restarts
                log.exception("push bridge: consumer failed; reconnecting in 1s")
                stop.wait(1.0)
            finally:
                cons.close()


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


def _report(reporter: PositionReporter, ids: dict[str, str], positions: dict) -> None:
    for topic, topic_id in ids.items():
        reporter.report(topic, topic_id, {p: o for (t, p), o in positions.items() if t == topic})


def _follow_rollover(
    rollovers: RolloverLog, reporter: PositionReporter, ids: dict[str, str], positions: dict
) -> dict[str, str]:
    """Move ``positions`` to the same records in the new log; the new topic ids.

    A topic the rollover log does not lead to (the broker lost its data) is read again
    from its start: the duplicate checks above keep it from being pushed twice."""
    now = topic_ids(reporter.admin, list(ids))
    for topic, new_id in now.items():
        parts = {p: o for (t, p), o in positions.items() if t == topic}
        moved = rollovers.translate(ids[topic], parts, new_id) if ids[topic] != new_id else parts
        for p, offset in (moved or dict.fromkeys(parts, 0)).items():
            positions[(topic, p)] = offset
    log.info("push bridge: the broker rolled over; following its new log")
    return now


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
        thread = threading.Thread(
            target=Bridge(publish).run, args=(stop, ready), name="push-bridge", daemon=True
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

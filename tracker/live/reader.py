"""The push bridge's Kafka readers: one consumer and thread per entry of :data:`READERS`.

Each reader follows its topics from their end, reconnects by itself after a broker
failure, skips what no socket would get before parsing it (``worth_parsing``), hands each
poll to :meth:`tracker.live.bridge.Bridge.handle`, and reports its positions to the broker
for pipeline health (:mod:`runtime.offsets`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol

from confluent_kafka import KafkaError, TopicPartition

from contract.events import Topic, now_ms, topic_name
from runtime import kafka
from runtime.offsets import OffsetReporter
from tracker.cache import reads
from tracker.live.metrics import BRIDGE_HANDLE, BRIDGE_RECORD_AGE, measure_poll

log = logging.getLogger(__name__)

#: The topics the bridge follows, each reader (a consumer and its thread) its own.
#: Each topic is read alone, so a burst on one (a fleet's GPS points, a replay of
#: enriched records) never queues another's records (statuses) behind it.
READERS = ((Topic.ORDER_STATUSES,), (Topic.DELIVERY_LOCATIONS,), (Topic.ORDERS_ENRICHED,))

#: Records one poll takes at most.
POLL_RECORDS = 1000


class Handler(Protocol):
    """What a reader hands its records to (:class:`tracker.live.bridge.Bridge`)."""

    def worth_parsing(self, topic: str, key: bytes | None, value: bytes | None = None) -> bool: ...

    def handle(self, records: list[tuple[Topic, bytes]], *, fleet: bool) -> None: ...

    def take_new_versions(self) -> dict[int, int]: ...

    def take_new_scopes(self) -> dict[str, tuple[int, int]]: ...


def run_readers(
    handler: Handler, stop: threading.Event, ready: threading.Event | None = None
) -> None:
    """Follow every topic from its end until ``stop``: one reader per :data:`READERS`
    entry, each in its own thread, reconnecting by itself.

    ``ready`` is set once every reader's start offsets are fixed: every record produced
    after that moment will be handled (what came before is in the snapshot).
    """
    readies = [threading.Event() for _ in READERS]
    threads = [
        threading.Thread(
            target=_follow,
            args=(handler, topics, f"bridge-{os.getpid()}-{index}", stop, started),
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
    handler: Handler,
    topics: tuple[Topic, ...],
    reader: str,
    stop: threading.Event,
    ready: threading.Event,
) -> None:
    """One reader: ``topics`` in one consumer, from their end, until ``stop``. Only the
    reader of the couriers' points sends the fleet, so its messages keep their order."""
    names = {topic_name(topic): topic for topic in topics}
    fleet = Topic.DELIVERY_LOCATIONS in topics
    # The enriched reader registers the versions it reads, so reads of orders that have
    # not changed skip Pinot (tracker.cache.reads); its heartbeat says it reads.
    registrar = reads.Registrar() if Topic.ORDERS_ENRICHED in topics else None
    ages = {name: BRIDGE_RECORD_AGE.labels(name) for name in names}
    handled = BRIDGE_HANDLE.labels(",".join(names))
    reporter = OffsetReporter(reader)  # one per reader of each process
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
                batch = (
                    [first, *cons.consume(POLL_RECORDS - 1, timeout=0)] if first is not None else []
                )
                records = []
                seen = {name: [0, 0] for name in names}  # topic -> [records, newest ms]
                received = now_ms()
                for msg in batch:
                    err = msg.error()
                    if err is None:
                        topic, stamp, value = msg.topic(), msg.timestamp()[1], msg.value()
                        ages[topic].observe(max(0, received - stamp) / 1000)
                        if handler.worth_parsing(topic, msg.key(), value):
                            records.append((names[topic], value))
                        positions[(topic, msg.partition())] = msg.offset() + 1
                        mine = seen[topic]
                        mine[0], mine[1] = mine[0] + 1, max(mine[1], stamp)
                    elif err.code() != KafkaError._PARTITION_EOF:
                        log.warning("push bridge: %s", err)
                started = time.perf_counter()
                handler.handle(records, fleet=fleet)
                if records:
                    handled.observe(time.perf_counter() - started)
                if registrar is not None:
                    registrar.register(handler.take_new_versions(), handler.take_new_scopes())
                measure_poll(seen, len(batch) < POLL_RECORDS)
        except Exception:  # noqa: BLE001 - the bridge must outlive broker restarts
            log.exception("push bridge: consumer failed; reconnecting in 1s")
            stop.wait(1.0)
        finally:
            cons.close()
    reporter.close()


def _by_topic(positions: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
    """Positions as the reporter takes them: topic -> partition -> next offset."""
    out: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in positions.items():
        out.setdefault(topic, {})[partition] = offset
    return out

"""The Kafka connector's reading side on an executor: planned ranges read exactly, with
clients cached per worker until the embedded broker rolls over.

:func:`read_ranges` reads ``[start, end)`` of each planned partition and never returns
a short range; :func:`cached_client` keeps one consumer or admin client per worker
thread (:class:`UntilRollover` replaces it after a rollover). Pure confluent-kafka:
:mod:`embedded.spark_kafka` wraps these in the Spark data source.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

#: The connector's logger: its warnings keep the name they had in one module.
log = logging.getLogger("embedded.spark_kafka")


def new_consumer(bootstrap: str) -> Any:
    from contract.conf import KafkaConfig
    from contract.kafka import consumer

    return consumer(
        KafkaConfig(bootstrap_servers=bootstrap), **{"group.id": "ordertrack-spark-source"}
    )


def new_admin(bootstrap: str) -> Any:
    from contract.conf import KafkaConfig
    from contract.kafka import admin

    return admin(KafkaConfig(bootstrap_servers=bootstrap))


class UntilRollover:
    """A Kafka client kept for reuse until the embedded broker rolls over, then a new one.

    A rollover recreates every topic under its name with a new id. A librdkafka client
    that knew the old topics and meets the new ones can crash its whole process (a
    segfault in librdkafka's main thread: a NULL topic name given to strcmp), which in a
    Spark Python worker fails the task and the query; a client made after the rollover
    never knew the old ids. Production brokers never roll over: one client for good.
    """

    def __init__(self, bootstrap: str, make: Callable[[str], Any]) -> None:
        from contract.conf import KafkaConfig
        from contract.positions import RolloverLog

        self.bootstrap = bootstrap
        self._make = make
        self._client: Any = None
        self._rollovers = RolloverLog(KafkaConfig(bootstrap_servers=bootstrap))
        self._rollovers.changed()

    def get(self) -> Any:
        if self._client is not None and self._rollovers.changed():
            self.close()
        if self._client is None:
            self._client = self._make(self.bootstrap)
        return self._client

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and hasattr(client, "close"):  # an AdminClient has no close()
            client.close()


CACHE_LOCK = threading.Lock()
_CACHED: dict[tuple[Any, ...], UntilRollover] = {}


def cached_client(make: Callable[[str], Any], bootstrap: str) -> Any:
    """A client of ``make``'s kind reused across tasks of this worker process (one per
    thread), until the embedded broker rolls over."""
    key = (make, threading.get_ident(), bootstrap)
    with CACHE_LOCK:
        found = _CACHED.get(key)
        if found is None:
            found = _CACHED[key] = UntilRollover(bootstrap, make)
    return found.get()


class KafkaRange:
    """``[start, end)`` of one topic partition, in the topic incarnation ``topic_id``."""

    def __init__(
        self, topic: str, partition: int, start: int, end: int, topic_id: str | None = None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.topic_id = topic_id


_ROLLOVER_LOGS: dict[str, Any] = {}


def rollover_log(bootstrap: str) -> Any:
    """The embedded broker's rollover log, one per process and broker."""
    from contract.conf import KafkaConfig
    from contract.positions import RolloverLog

    with CACHE_LOCK:
        found = _ROLLOVER_LOGS.get(bootstrap)
        if found is None:
            found = _ROLLOVER_LOGS[bootstrap] = RolloverLog(
                KafkaConfig(bootstrap_servers=bootstrap)
            )
        return found


def describe_topic_ids(bootstrap: str, topics: list[str], timeout: float) -> dict[str, str]:
    """Topic ids, through the worker's admin client (kept: an admin client dropped with a
    request still pending can take the worker down)."""
    from contract.positions import topic_ids

    return topic_ids(cached_client(new_admin, bootstrap), topics, timeout)


def read_ranges(
    consumer: Callable[[], Any],
    parts: Sequence[KafkaRange],
    timeout: float,
    topic_ids: Callable[[list[str]], dict[str, str]] | None = None,
    rollovers: Any = None,
) -> Iterator[tuple]:
    """Yield the rows of ``[start, end)`` of each partition, with one assignment.

    ``consumer()`` gives the consumer to read with; it is asked again after a rollover,
    when :func:`cached_client` gives a new one (see :class:`UntilRollover`).

    A slow broker only slows the read: the task fails (TimeoutError, so the
    micro-batch fails and is retried) when no planned record has arrived for
    ``timeout`` seconds, never returning a short range. The embedded broker may roll over before
    or during the read (``rollovers``, a :class:`~contract.positions.RolloverLog`):
    the rest of each range is then read from the new log, where the same records sit
    at lower offsets, and rows keep the offsets they were planned with. One exception:
    a range planned in a topic that has since been recreated empty (the embedded
    broker crashed) can never complete; it is dropped with a warning, and the next
    batch reads the new topic from its start.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    todo = {(p.topic, p.partition): p for p in parts if p.end > p.start}
    if not todo:
        return
    next_offset = {tp: p.start for tp, p in todo.items()}
    #: planned offset - offset in the log now being read (after rollovers)
    shift = dict.fromkeys(todo, 0)

    cons: Any = None

    def assign() -> None:
        nonlocal cons
        cons = consumer()
        cons.assign([TopicPartition(t, p, next_offset[(t, p)] - shift[(t, p)]) for t, p in todo])

    def follow_rollover() -> None:
        current = topic_ids(sorted({t for t, _ in todo})) if topic_ids else {}
        for tp, part in list(todo.items()):
            now = current.get(tp[0])
            if part.topic_id is None or now is None or now == part.topic_id:
                continue
            moved = rollovers.translate(part.topic_id, {tp[1]: next_offset[tp]}, now)
            if moved is None:
                continue  # recreated empty: the timeout path below drops it
            shift[tp] = next_offset[tp] - moved[tp[1]]
        assign()

    if rollovers is not None:
        rollovers.changed()
        if any(rollovers.knows(p.topic_id) for p in todo.values()):
            follow_rollover()  # planned before a rollover, read after it
        else:
            assign()
    else:
        assign()
    deadline = time.monotonic() + timeout
    try:
        while todo:
            missing = sum(p.end - next_offset[tp] for tp, p in todo.items())
            # Ask for exactly what is missing: consume() returns as soon as it has that
            # many messages, whereas a larger count always waits out the timeout.
            batch = cons.consume(min(missing, 5000), timeout=0.1)
            if rollovers is not None and rollovers.changed():
                # Some of these may come from the new log, at shifted offsets: read again.
                follow_rollover()
                continue
            for msg in batch:
                tp = (msg.topic(), msg.partition())
                part = todo.get(tp)
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                if part is None:
                    continue
                offset = msg.offset() + shift[tp]
                if offset < next_offset[tp]:
                    continue
                # Only progress in a planned range counts: records of partitions read to
                # their end keep coming and must not hide one that gets nothing.
                deadline = time.monotonic() + timeout
                if offset >= part.end:
                    del todo[tp]
                    continue
                next_offset[tp] = offset + 1
                if offset + 1 >= part.end:
                    del todo[tp]
                ts = msg.timestamp()[1]
                yield (
                    msg.key(),
                    msg.value(),
                    part.topic,
                    part.partition,
                    offset,
                    datetime.fromtimestamp(ts / 1000, UTC) if ts and ts > 0 else None,
                )
            if todo and time.monotonic() > deadline:
                current = topic_ids(sorted({t for t, _ in todo})) if topic_ids else {}
                gone = [
                    tp
                    for tp, part in todo.items()
                    if part.topic_id is not None
                    and current.get(tp[0], part.topic_id) != part.topic_id
                ]
                for tp in gone:
                    log.warning(
                        "kafka source: %s was recreated after this batch was planned; "
                        "its records up to offset %d no longer exist",
                        tp,
                        todo[tp].end,
                    )
                    del todo[tp]
                if todo:
                    raise TimeoutError(
                        f"kafka source: no record of {sorted(todo)} for {timeout:g} s "
                        "before the end of the planned range"
                    )
                deadline = time.monotonic() + timeout
    finally:
        if cons is not None:
            cons.unassign()

"""The Kafka layer: producers, consumers and topics over confluent-kafka.

One place builds every client so that the reliability settings (idempotent
producer, acks=all, fetch waits) are the same for Django, the relay, the
simulator and the push bridge. (The stream job reads and writes through Spark's own
Kafka connector, and Pinot's servers consume with their own Java client.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from contract.events import Event, Topic, topic_name
from runtime.conf import KafkaConfig, kafka_config

log = logging.getLogger(__name__)

#: librdkafka settings every client gets: quiet about expected disconnects, and its
#: log lines routed through Python logging (component logs, pytest's capture).
_COMMON = {"log.connection.close": False, "logger": logging.getLogger("librdkafka")}


def producer(config: KafkaConfig | None = None, **overrides: object) -> Producer:
    """An idempotent, acks=all producer: retries never duplicate or reorder."""
    config = config or kafka_config()
    settings: dict[str, object] = {
        **_COMMON,
        "bootstrap.servers": config.bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        # The Java client's partitioner (murmur2), not librdkafka's default (CRC32): the
        # stream job's records, written by Spark's Kafka sink, and ours must put one
        # order's records in the same partition (per-order order, Pinot's upsert).
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
        # JSON events shrink 2x with lz4 for little CPU: less broker memory and network.
        "compression.type": "lz4",
    }
    settings.update(overrides)
    return Producer(settings)


#: How long an idle reader's fetch waits in the broker (Kafka answers it as soon as
#: data arrives, so this bounds only the idle reader's wake-ups, not latency).
FETCH_WAIT_MS = 500


def consumer(config: KafkaConfig | None = None, **overrides: object) -> Consumer:
    """A consumer for assign()-based reading: the caller owns the offsets.

    Every reader here reads all partitions of its topics (each web worker's push
    bridge reads every order), so readers assign partitions and track offsets
    themselves; the group id is only a label.
    """
    config = config or kafka_config()
    settings: dict[str, object] = {
        **_COMMON,
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": "ordertrack-reader",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": FETCH_WAIT_MS,
        "fetch.error.backoff.ms": 50,
    }
    settings.update(overrides)
    return Consumer(settings)


def admin(config: KafkaConfig | None = None, **overrides: object) -> AdminClient:
    config = config or kafka_config()
    return AdminClient({**_COMMON, "bootstrap.servers": config.bootstrap_servers, **overrides})


def produce(
    prod: Producer,
    topic: str,
    key: bytes | None,
    value: bytes,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    **extra: Any,
) -> None:
    """Queue one message; while librdkafka's local queue is full, serve delivery
    reports (which frees it) and retry, so a burst slows the caller instead of failing.
    ``extra``: librdkafka's ``partition``, ``timestamp``, ``headers``."""
    while True:
        try:
            prod.produce(topic, key=key, value=value, on_delivery=on_delivery, **extra)
            return
        except BufferError:
            prod.poll(0.05)


def publish(prod: Producer, event: Event, on_delivery=None) -> None:
    """Queue ``event`` on its topic, keyed by order id (see the event contract)."""
    produce(prod, topic_name(event.TOPIC), event.key(), event.to_json(), on_delivery)


#: Delivery errors after which a record may or may not be in the topic.
IN_DOUBT_ERRORS = frozenset({KafkaError._MSG_TIMED_OUT, KafkaError._PURGE_INFLIGHT})


class Undelivered(Exception):
    """The broker did not acknowledge every message of a :class:`Deliveries` batch."""

    def __init__(self, total: int, acked: list[Any], errors: dict[Any, str]) -> None:
        self.total, self.acked, self.errors = total, acked, errors
        first = next(iter(errors.values()), "not acknowledged in time")
        super().__init__(f"{total - len(acked)} of {total} messages not acknowledged: {first}")


class Deliveries:
    """One batch of messages: produce each, flush once, then know which the broker
    acknowledged (acks=all). Whoever must not lose a message (the outbox relay, the
    courier telemetry, the stream sink) checks with :meth:`flush`, which raises
    :class:`Undelivered` unless every message was acknowledged.

    Each message carries a ``tag`` (an outbox row id, an index) so the caller
    learns which ones to retry: ``acked`` lists their tags, ``errors`` maps a tag
    to the broker's error.
    """

    def __init__(self, prod: Producer) -> None:
        self.producer = prod
        self.total = 0
        self.acked: list[Any] = []
        self.errors: dict[Any, str] = {}
        #: tags whose fate the broker never told (timed out or purged in flight): they
        #: may have been written, so a retry can duplicate them (same event id).
        self.in_doubt: list[Any] = []
        self._tags: list[Any] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes, tag: Any = None, **extra: Any
    ) -> None:
        """Queue one message (``extra``: as :func:`produce`)."""
        tag = self.total if tag is None else tag
        self.total += 1
        self._tags.append(tag)

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.acked.append(tag)
            elif err.code() in IN_DOUBT_ERRORS:
                self.in_doubt.append(tag)
                self.errors[tag] = f"in doubt (may have been written): {err}"
            else:
                self.errors[tag] = str(err)

        produce(self.producer, topic, key, value, on_delivery, **extra)

    def unknown_in_doubt(self, reason: str) -> None:
        """Count every message without a delivery report as in doubt: its producer failed
        (a fatal error once its broker lost the producer's state), so it may or may not
        have been written."""
        settled = {*self.acked, *self.errors}
        for tag in self._tags:
            if tag not in settled:
                self.in_doubt.append(tag)
                self.errors[tag] = f"in doubt ({reason})"

    def publish(self, event: Event, tag: Any = None) -> None:
        """Queue ``event`` on its topic, keyed by order id (see the event contract)."""
        self.produce(topic_name(event.TOPIC), event.key(), event.to_json(), tag)

    def flush(self, timeout: float) -> list[Any]:
        """Wait up to ``timeout`` seconds for every acknowledgement; the acked tags, or
        :class:`Undelivered` (whose ``acked`` still says which ones made it)."""
        try:
            self.producer.flush(timeout)
        except (KafkaException, SystemError) as exc:
            # SystemError: confluent-kafka's flush() can return NULL without an exception
            # when the producer turns fatal during the call.
            self.unknown_in_doubt(f"producer failed: {exc}")
        if len(self.acked) < self.total:
            raise Undelivered(self.total, list(self.acked), dict(self.errors))
        return list(self.acked)


class SharedProducer:
    """One producer shared by a process's threads, replaced when it stops delivering.

    A producer whose broker lost its state (a broker's data deleted, a cluster
    rebuilt) may refuse every record from then on (``PRODUCER_FENCED``,
    ``UNKNOWN_PRODUCER_ID``, ``OUT_OF_ORDER_SEQUENCE``, a fatal error) or time them all
    out. Whoever sees a batch fail calls :meth:`replace`; the next caller gets a new
    producer (a new producer id), and the failed batch's records are retried by the
    caller, which knows which were acknowledged.
    """

    def __init__(self, config: KafkaConfig | None = None, **overrides: object) -> None:
        self.config = config
        self.overrides = overrides
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self.replaced = 0

    def get(self) -> Producer:
        """The producer (created on first use)."""
        with self._lock:
            if self._producer is None:
                self._producer = producer(self.config, **self.overrides)
            return self._producer

    def replace(self, broken: Producer) -> None:
        """Stop using ``broken`` (once, however many threads saw it fail)."""
        with self._lock:
            if self._producer is not broken:
                return
            self._producer = None
            self.replaced += 1
        log.warning("producer stopped delivering; replaced by a new one")
        try:
            # Records other threads still have inside get a delivery report (an error):
            # their callers retry them.
            broken.purge(in_queue=True, in_flight=True, blocking=False)
            broken.flush(1.0)
        except KafkaException as exc:
            log.warning("could not settle the replaced producer: %s", exc)


def topic_specs(names: Iterable[str], config: KafkaConfig | None = None) -> list[NewTopic]:
    """How the product's topics are created: the configured partitions, replicas and
    retention, and ``min.insync.replicas`` on the topic itself, so that a broker default
    changed later (or missed on one node) never weakens what ``acks=all`` promises."""
    config = config or kafka_config()
    return [
        NewTopic(
            name,
            num_partitions=config.partitions,
            replication_factor=config.replication_factor,
            config={
                "retention.ms": str(config.retention_ms),
                "retention.bytes": str(config.retention_bytes),
                "min.insync.replicas": str(config.min_insync_replicas),
            },
        )
        for name in names
    ]


def ensure_topics(
    topics: Iterable[Topic | str] = tuple(Topic),
    config: KafkaConfig | None = None,
    timeout: float = 15.0,
) -> list[str]:
    """Create missing topics as :func:`topic_specs` says.

    Returns the physical names created (empty when all existed). Safe to call
    concurrently and repeatedly: "already exists" is success.
    """
    config = config or kafka_config()
    client = admin(config)
    names = [topic_name(t, config.topic_prefix) for t in topics]
    existing = set(client.list_topics(timeout=timeout).topics)
    missing = [n for n in names if n not in existing]
    if not missing:
        return []
    futures = client.create_topics(topic_specs(missing, config), operation_timeout=timeout)
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created


def partitions_of(cons: Consumer, topic: str, timeout: float = 10.0) -> list[int]:
    metadata = cons.list_topics(topic, timeout=timeout).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)


def end_offsets(
    cons: Consumer, topic: str, partitions: Iterable[int] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """Each partition's next offset (its high watermark)."""
    parts = list(partitions) if partitions is not None else partitions_of(cons, topic, timeout)
    return {
        p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in parts
    }


def start_offsets(
    cons: Consumer, topic: str, partitions: Iterable[int] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """Each partition's first offset still in the log (retention deletes the ones below)."""
    parts = list(partitions) if partitions is not None else partitions_of(cons, topic, timeout)
    return {
        p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[0] for p in parts
    }


def retention_report(config: KafkaConfig | None = None, skip: Iterable[str] = ()) -> list[str]:
    """One line per product topic that retention has cut: how many records it removed
    (whether every reader had read them first is each reader's own report). ``skip``:
    topics just created (empty, and their partitions may have no leader yet)."""
    config = config or kafka_config()
    cons = consumer(config)
    lines = []
    try:
        existing = set(cons.list_topics(timeout=10).topics) - set(skip)
        for topic in Topic:
            name = topic_name(topic, config.topic_prefix)
            if name not in existing:
                continue
            try:
                removed = sum(start_offsets(cons, name).values())
            except KafkaException as exc:
                lines.append(f"could not read where {name} starts: {exc}")
                continue
            if removed:
                cap = (
                    f", {config.retention_bytes // 1_048_576} MiB a partition"
                    if config.retention_bytes > 0
                    else ""
                )
                lines.append(
                    f"retention has removed the oldest {removed} records of {name} "
                    f"(kept: {config.retention_ms // 3_600_000} h{cap})"
                )
    finally:
        cons.close()
    return lines


@dataclass(frozen=True)
class Record:
    """A consumed message, detached from librdkafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def read_topic(topic: Topic | str, **options: Any) -> list[Record]:
    """Read a whole topic (or from ``start`` offsets) until every partition is idle
    (``options``: those of :func:`iter_topic`, but ``follow``).

    "Idle" means end-of-partition was reached and nothing new arrived for
    ``idle_timeout`` seconds.
    """
    return list(iter_topic(topic, **options))


def iter_topic(
    topic: Topic | str,
    *,
    config: KafkaConfig | None = None,
    start: dict[int, int] | None = None,
    idle_timeout: float = 1.0,
    max_wait: float = 30.0,
    follow: bool = False,
    stop: threading.Event | None = None,
) -> Iterator[Record]:
    """Yield records of ``topic`` in per-partition order; stop when idle unless ``follow``,
    and in any case once ``stop`` is set (a follower of a quiet topic yields nothing, so
    its caller cannot otherwise end it)."""
    config = config or kafka_config()
    name = (
        topic_name(topic, config.topic_prefix) if topic in Topic._value2member_map_ else str(topic)
    )
    cons = consumer(config)
    try:
        parts = partitions_of(cons, name)
        cons.assign(
            [TopicPartition(name, p, (start or {}).get(p, OFFSET_BEGINNING)) for p in parts]
        )
        at_eof: set[int] = set()
        deadline = time.monotonic() + max_wait
        last_activity = time.monotonic()
        while (follow or time.monotonic() < deadline) and not (stop and stop.is_set()):
            # poll() returns with the first record; consume(timeout=0) drains the rest
            # (consume alone waits out its timeout for a batch that is not full).
            first = cons.poll(0.1)
            batch = [first, *cons.consume(999, timeout=0)] if first is not None else []
            for msg in batch:
                err = msg.error()
                if err is None:
                    at_eof.discard(msg.partition())
                    last_activity = time.monotonic()
                    yield Record(
                        topic=msg.topic(),
                        partition=msg.partition(),
                        offset=msg.offset(),
                        key=msg.key(),
                        value=msg.value(),
                        timestamp=msg.timestamp()[1],
                    )
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_eof.add(msg.partition())
                else:
                    raise KafkaException(err)
            if (
                not follow
                and len(at_eof) == len(parts)
                and time.monotonic() - last_activity >= idle_timeout
            ):
                return
    finally:
        cons.close()

"""The Kafka layer: producers, consumers and topics over confluent-kafka.

One place builds every client so that the reliability settings (idempotent
producer, acks=all, short fetch waits) are the same for Django, the relay, the
simulator, the Spark data source and the Pinot stand-in.

Tansu, the embedded broker, reports a partition's high watermark as the base
offset of the *last record batch* + 1, so a reader that trusts the watermark
misses the tail of a batched write. :func:`end_offsets` finds the true end by
reading forward from the listed end to end-of-partition; every reader here
uses it (or reads to end-of-partition directly), never the raw watermark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tracker.core.conf import KafkaConfig, kafka_config
from tracker.core.events import Event, Topic, topic_name

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
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
    }
    settings.update(overrides)
    return Producer(settings)


def consumer(config: KafkaConfig | None = None, **overrides: object) -> Consumer:
    """A consumer for assign()-based reading: the caller owns the offsets.

    Group joins are slow on Tansu (seconds), so readers assign partitions and
    track offsets themselves; the group id is only a label.
    """
    config = config or kafka_config()
    settings: dict[str, object] = {
        **_COMMON,
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": "ordertrack-reader",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 5,
        "fetch.error.backoff.ms": 50,
    }
    settings.update(overrides)
    return Consumer(settings)


def admin(config: KafkaConfig | None = None) -> AdminClient:
    config = config or kafka_config()
    return AdminClient({**_COMMON, "bootstrap.servers": config.bootstrap_servers})


def publish(prod: Producer, event: Event, on_delivery=None) -> None:
    """Queue ``event`` on its topic, keyed by order id (see the event contract)."""
    while True:
        try:
            prod.produce(
                topic_name(event.TOPIC),
                key=event.key(),
                value=event.to_json(),
                on_delivery=on_delivery,
            )
            return
        except BufferError:
            prod.poll(0.05)  # local queue full: serve delivery reports, then retry


def ensure_topics(
    topics: Iterable[Topic | str] = tuple(Topic),
    config: KafkaConfig | None = None,
    timeout: float = 15.0,
) -> list[str]:
    """Create missing topics with the configured partitions and retention.

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
    futures = client.create_topics(
        [
            NewTopic(
                name,
                num_partitions=config.partitions,
                replication_factor=config.replication_factor,
                config={"retention.ms": str(config.retention_ms)},
            )
            for name in missing
        ],
        operation_timeout=timeout,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created


def topics_exist(topics: Iterable[Topic | str], config: KafkaConfig | None = None) -> bool:
    """Whether every topic exists (False also when the broker is unreachable)."""
    config = config or kafka_config()
    try:
        existing = admin(config).list_topics(timeout=3).topics
    except KafkaException:
        return False
    return all(topic_name(t, config.topic_prefix) in existing for t in topics)


def partitions_of(cons: Consumer, topic: str, timeout: float = 10.0) -> list[int]:
    metadata = cons.list_topics(topic, timeout=timeout).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)


def end_offsets(
    cons: Consumer, topic: str, partitions: Iterable[int] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """The true next offset of each partition, robust to Tansu's watermark.

    Lists the high watermark, then reads forward from (listed end - 1) to
    end-of-partition and takes the highest offset seen + 1. On a broker whose
    watermark is right (Apache Kafka) the forward read sees one record or none.
    ``cons`` must have ``enable.partition.eof`` set (as :func:`consumer` does);
    its assignment is replaced.
    """
    parts = list(partitions) if partitions is not None else partitions_of(cons, topic, timeout)
    ends: dict[int, int] = {}
    starts = []
    for p in parts:
        low, high = cons.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
        ends[p] = high
        if high > low:
            starts.append(TopicPartition(topic, p, max(high - 1, low)))
    if not starts:
        return ends
    cons.assign(starts)
    pending = {tp.partition for tp in starts}
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for msg in cons.consume(500, timeout=0.05):
                err = msg.error()
                if err is None:
                    ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                else:
                    raise KafkaException(err)
    finally:
        cons.unassign()
    if pending:
        raise TimeoutError(f"could not find the end of {topic} partitions {sorted(pending)}")
    return ends


@dataclass(frozen=True)
class Record:
    """A consumed message, detached from librdkafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def read_topic(
    topic: Topic | str,
    *,
    config: KafkaConfig | None = None,
    start: dict[int, int] | None = None,
    idle_timeout: float = 1.0,
    max_wait: float = 30.0,
) -> list[Record]:
    """Read a whole topic (or from ``start`` offsets) until every partition is idle.

    "Idle" means end-of-partition was reached and nothing new arrived for
    ``idle_timeout`` seconds; this is how tests count outputs (never by the
    watermark, which Tansu under-reports).
    """
    return list(
        iter_topic(topic, config=config, start=start, idle_timeout=idle_timeout, max_wait=max_wait)
    )


def iter_topic(
    topic: Topic | str,
    *,
    config: KafkaConfig | None = None,
    start: dict[int, int] | None = None,
    idle_timeout: float = 1.0,
    max_wait: float = 30.0,
    follow: bool = False,
) -> Iterator[Record]:
    """Yield records of ``topic`` in per-partition order; stop when idle unless ``follow``."""
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
        while follow or time.monotonic() < deadline:
            batch = cons.consume(1000, timeout=0.1)
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

"""Reading a topic from Python: a whole topic until it is idle, or following it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from contract.events import Topic, topic_name
from runtime.conf import KafkaConfig, kafka_config
from runtime.kafka.clients import consumer
from runtime.kafka.topics import partitions_of


@dataclass(frozen=True)
class ConsumerRecord:
    """A consumed message, detached from librdkafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def read_topic(topic: Topic | str, **options: Any) -> list[ConsumerRecord]:
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
) -> Iterator[ConsumerRecord]:
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
                    yield ConsumerRecord(
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

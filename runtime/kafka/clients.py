"""The Kafka clients: how every producer, consumer and admin client of ours is built.

One place builds every client so that the reliability settings (idempotent
producer, acks=all, fetch waits) are the same for Django, the relay, the
simulator and the push bridge. (The stream job reads and writes through Spark's own
Kafka connector, and Pinot's servers consume with their own Java client.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from contract.events import Event, topic_name
from runtime.conf import KafkaConfig, kafka_config

#: The codec of every producer's batches, ours and the stream job's sink (streaming/job.py):
#: the JSON events repeat their keys and, in the enriched topics, the whole order; zstd
#: keeps an enriched record in about 60% of lz4's bytes (16 KiB batches of orders_enriched:
#: 5.0x against 3.2x; issue 70, docs/performance.md, "Kafka bytes per GPS point"), for
#: little CPU at these rates.
COMPRESSION = "zstd"

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
        "compression.type": COMPRESSION,
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
    """An admin client (topics, metadata) with the common settings."""
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


def publish(
    prod: Producer,
    event: Event,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
) -> None:
    """Queue ``event`` on its topic, keyed by order id (see the event contract)."""
    produce(prod, topic_name(event.TOPIC), event.key(), event.to_json(), on_delivery)

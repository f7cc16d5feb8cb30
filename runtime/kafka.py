"""The Kafka layer: producers, consumers and topics over confluent-kafka.

The one name callers import (``from runtime import kafka``); each part lives in a module
of its own: the clients and their settings (``kafka_clients``), knowing what the broker
acknowledged (``kafka_delivery``), the topics and their offsets (``kafka_topics``) and
reading a topic (``kafka_reading``).
"""

from runtime.kafka_clients import FETCH_WAIT_MS, admin, consumer, produce, producer, publish
from runtime.kafka_delivery import IN_DOUBT_ERRORS, Deliveries, SharedProducer, Undelivered
from runtime.kafka_reading import Record, iter_topic, read_topic
from runtime.kafka_topics import (
    end_offsets,
    ensure_topics,
    partitions_of,
    retention_report,
    start_offsets,
    topic_specs,
)

__all__ = [
    "FETCH_WAIT_MS",
    "IN_DOUBT_ERRORS",
    "Deliveries",
    "Record",
    "SharedProducer",
    "Undelivered",
    "admin",
    "consumer",
    "end_offsets",
    "ensure_topics",
    "iter_topic",
    "partitions_of",
    "produce",
    "producer",
    "publish",
    "read_topic",
    "retention_report",
    "start_offsets",
    "topic_specs",
]

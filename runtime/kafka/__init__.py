"""The Kafka layer: producers, consumers and topics over confluent-kafka.

The one name callers import (``from runtime import kafka``); each part lives in a module
of its own: the clients and their settings (``clients``), knowing what the broker
acknowledged (``delivery``), the topics and their offsets (``topics``) and
reading a topic (``reading``).
"""

from runtime.kafka.clients import FETCH_WAIT_MS, admin, consumer, produce, producer, publish
from runtime.kafka.delivery import IN_DOUBT_ERRORS, Deliveries, SharedProducer, Undelivered
from runtime.kafka.reading import ConsumerRecord, iter_topic, read_topic
from runtime.kafka.topics import (
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
    "ConsumerRecord",
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

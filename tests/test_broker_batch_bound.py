"""The embedded broker's second bound: batches per partition (docs/broker.md).

Tansu lists every batch of a partition on each fetch, so small records written one
batch at a time make fetches come back empty long before the log's memory is large.
The broker process counts what was appended to each partition since its last restart
and rolls over past ``KAFKA_EMBEDDED_MAX_BATCHES``; the records a rollover carries come
in a few batches and do not count towards the next one.
"""

from __future__ import annotations

import pytest

from contract import kafka
from contract.conf import KafkaConfig
from contract.events import Topic, topic_name
from embedded.broker import BoundedBroker
from tests.conftest import free_port


@pytest.fixture
def bounded(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "bound.")
    broker = BoundedBroker(KafkaConfig()).start()
    yield broker
    broker.stop()


def _send_one_batch_each(count: int, partition: int) -> None:
    prod = kafka.producer(**{"linger.ms": 0})
    for i in range(count):
        batch = kafka.Deliveries(prod)
        batch.produce(topic_name(Topic.DELIVERY_LOCATIONS), b"k", b"%d" % i, partition=partition)
        batch.flush(10)


def test_batches_appended_to_the_busiest_partition_are_counted_from_the_last_rollover(bounded):
    assert bounded.most_appended() == 0
    _send_one_batch_each(120, partition=1)
    _send_one_batch_each(30, partition=0)
    assert bounded.most_appended() == 120

    carried = bounded.rollover()  # nobody reported a position: all 150 are unread, carried
    assert carried[topic_name(Topic.DELIVERY_LOCATIONS)] == 150
    assert bounded.most_appended() == 0
    _send_one_batch_each(5, partition=0)
    assert bounded.most_appended() == 5
    values = {r.value for r in kafka.read_topic(Topic.DELIVERY_LOCATIONS, idle_timeout=0.5)}
    assert values == {b"%d" % i for i in range(120)} | {b"%d" % i for i in range(30)} | {
        b"%d" % i for i in range(5)
    }

"""The embedded broker's second bound: record batches per partition (docs/broker.md).

Tansu lists every batch of a partition on each fetch, so small records written one
batch at a time make fetches come back empty long before the log's memory is large.
The broker's gate counts the batches in the produce requests it relays, and the broker
rolls over past ``KAFKA_EMBEDDED_MAX_BATCHES`` in a partition; the records a rollover
carries do not count towards the next one.
"""

from __future__ import annotations

import pytest

from contract import kafka
from contract.conf import KafkaConfig
from contract.events import Topic, topic_name
from embedded.broker import BoundedBroker
from tests.conftest import free_port

GPS = Topic.DELIVERY_LOCATIONS


@pytest.fixture
def bounded(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "bound.")
    broker = BoundedBroker(KafkaConfig()).start()
    yield broker
    broker.stop()


def _send(values: list[bytes], partition: int, one_batch: bool) -> None:
    """Each value in a batch of its own (a flush each), or all in one batch."""
    prod = kafka.producer(**{"linger.ms": 1000 if one_batch else 0})
    batch = kafka.Deliveries(prod)
    for value in values:
        batch.produce(topic_name(GPS), b"k", value, partition=partition)
        if not one_batch:
            batch.flush(10)
            batch = kafka.Deliveries(prod)
    batch.flush(10)


def test_the_gate_counts_record_batches_per_partition_from_the_last_rollover(bounded):
    assert bounded.most_appended() == 0
    singles = [b"s%d" % i for i in range(40)]
    _send(singles, partition=1, one_batch=False)
    assert bounded.gate.batches[(topic_name(GPS), 1)] == 40
    assert bounded.most_appended() == 40
    bulk = [b"b%d" % i for i in range(200)]
    _send(bulk, partition=0, one_batch=True)
    assert bounded.gate.batches[(topic_name(GPS), 0)] == 1  # 200 records, one batch
    assert bounded.most_appended() == 40

    carried = bounded.rollover()  # nobody reported a position: all 240 are unread, carried
    assert carried[topic_name(GPS)] == 240
    assert bounded.most_appended() == 0
    _send([b"after"], partition=0, one_batch=False)
    assert bounded.most_appended() == 1
    values = {r.value for r in kafka.read_topic(GPS, idle_timeout=0.5)}
    assert values == {*singles, *bulk, b"after"}

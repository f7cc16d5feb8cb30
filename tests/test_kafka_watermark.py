"""Tansu reports the high watermark as (base offset of the last batch + 1).

These tests prove that the readers the system uses still see every record,
including the tail of a batched write to a topic that then goes idle.
"""

from __future__ import annotations

from contract import kafka
from contract.conf import KafkaConfig
from contract.events import Topic, topic_name
from embedded.broker import EmbeddedBroker
from tests.conftest import free_port


def _produce_batched(n: int) -> None:
    prod = kafka.producer(**{"linger.ms": 50})
    for i in range(n):
        prod.produce(topic_name(Topic.ORDERS), key=b"42", value=str(i).encode())
    assert prod.flush(10) == 0


def test_broker_watermark_under_reports_batched_writes(kafka_topics):
    """Documents the quirk the readers must survive (if Tansu fixes it, this tells us)."""
    _produce_batched(10)
    cons = kafka.consumer()
    name = topic_name(Topic.ORDERS)
    highs = [
        cons.get_watermark_offsets(kafka.TopicPartition(name, p), timeout=5)[1]
        for p in kafka.partitions_of(cons, name)
    ]
    cons.close()
    assert sum(highs) < 10


def test_end_offsets_finds_the_true_end_of_an_idle_topic(kafka_topics):
    _produce_batched(10)
    cons = kafka.consumer()
    ends = kafka.end_offsets(cons, topic_name(Topic.ORDERS))
    cons.close()
    assert sum(ends.values()) == 10


def test_reading_to_idle_returns_the_last_records_of_a_batch(kafka_topics):
    _produce_batched(10)
    records = kafka.read_topic(Topic.ORDERS, idle_timeout=0.3)
    assert [r.value for r in records] == [str(i).encode() for i in range(10)]


def test_a_reader_gets_the_tail_of_a_partition_holding_many_batches(monkeypatch):
    """Tansu lists every batch of a partition when a fetch has data to return and answers
    nothing when that outlasts the fetch's max wait (docs/broker.md): with the old 5 ms
    wait, a reader of a partition past ~15,000 batches got nothing, for ever. The
    readers' wait must leave the broker time to find the records. A broker of its own:
    the session's holds every earlier test's batches, which slow its 30,000 writes."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")
    with EmbeddedBroker(KafkaConfig()):
        _read_the_tail_of_many_batches()


def _read_the_tail_of_many_batches() -> None:
    name = topic_name(Topic.ORDERS)
    prod = kafka.producer(**{"linger.ms": 0, "batch.num.messages": 1})
    batches = 30_000
    for i in range(batches):
        kafka.produce(prod, name, b"42", str(i).encode())
        prod.poll(0)
    assert prod.flush(120) == 0  # 30,000 single-record batches, one request each
    cons = kafka.consumer()
    try:
        partition = next(
            p for p, end in kafka.end_offsets(cons, name, timeout=5).items() if end == batches
        )
        cons.assign([kafka.TopicPartition(name, partition, batches - 1)])
        got = [m for m in cons.consume(1, timeout=3) if m.error() is None]
    finally:
        cons.close()
    assert [m.value() for m in got] == [str(batches - 1).encode()]

"""A batch of messages is known delivered only when the broker acknowledged every one."""

from __future__ import annotations

import pytest

from contract.events import Topic, topic_name
from runtime import kafka
from runtime.conf import KafkaConfig
from tests.conftest import free_port


def test_a_flushed_batch_lists_every_acknowledged_tag_and_the_records_are_readable(kafka_topics):
    batch = kafka.Deliveries(kafka.producer(**{"queue.buffering.max.messages": 10}))
    for i in range(50):  # more than the local queue holds: produce waits instead of failing
        batch.produce(topic_name(Topic.ORDERS), b"42", str(i).encode(), tag=f"row-{i}")
    assert sorted(batch.flush(10)) == sorted(f"row-{i}" for i in range(50))
    values = [r.value for r in kafka.read_topic(Topic.ORDERS)]
    assert values == [str(i).encode() for i in range(50)]  # one key: one partition, in order


def test_an_unreachable_broker_is_an_undelivered_batch_naming_what_is_missing():
    nobody = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}")
    batch = kafka.Deliveries(kafka.producer(nobody, **{"message.timeout.ms": 500}))
    batch.produce("orders", b"1", b"a")
    batch.produce("orders", b"2", b"b")
    with pytest.raises(kafka.Undelivered) as caught:
        batch.flush(5)
    assert (caught.value.total, caught.value.acked) == (2, [])
    assert set(caught.value.errors) == {0, 1}  # untagged messages are tagged by position
    assert str(caught.value).startswith("2 of 2 messages not acknowledged")


def test_topics_ensure_topics_created_are_known_with_leaders_at_once(kafka_broker):
    """CreateTopics answers before the broker's metadata has the topics: a client that
    asked at once (here one already connected, as a running reader is) was told they do
    not exist, 60 times in 60 on this machine; a test's first read of its fresh topics
    (``kafka_topics``) is such a question, and a busy machine widens the gap."""
    import uuid

    from runtime.kafka import consumer, ensure_topics
    from tests.engines import delete_topics_with_prefix

    config = KafkaConfig(topic_prefix=f"t{uuid.uuid4().hex[:10]}.")
    cons = consumer(config)
    created: list[str] = []
    try:
        cons.list_topics(timeout=10)  # connected before the topics exist
        created = ensure_topics(config=config)
        assert created
        for name in created:
            listed = cons.list_topics(name, timeout=10).topics[name]
            assert listed.error is None, (name, listed.error)
            assert len(listed.partitions) == config.partitions, name
            assert all(part.leader >= 0 for part in listed.partitions.values()), name
    finally:
        cons.close()
        delete_topics_with_prefix(config.topic_prefix, also=created)

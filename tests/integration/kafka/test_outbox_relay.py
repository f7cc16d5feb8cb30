"""The outbox relay publishes every event exactly once and in order per order,
across a broker outage that loses the broker's data (a node replaced with an empty
one), by replaying the outbox."""

from __future__ import annotations

import json
import threading
from collections import defaultdict

import pytest

from contract.events import SOURCE_TOPICS, Topic, topic_name
from localrun.ports import free_port
from runtime import kafka
from tests.engines import start_kafka
from tests.factories import make_courier, make_customer, make_restaurant, place
from tests.waiting import wait_until
from tracker.orders import services
from tracker.orders.policy import SYSTEM
from tracker.outbox.models import OutboxEvent
from tracker.outbox.relay import Relay


def _published_events() -> list[dict]:
    out = []
    for topic in (Topic.ORDERS, Topic.ORDER_STATUSES):
        for record in kafka.read_topic(topic, idle_timeout=0.3):
            body = json.loads(record.value)
            body["_key"] = record.key.decode()
            body["_partition"] = record.partition
            body["_offset"] = record.offset
            body["_topic"] = topic.value
            out.append(body)
    return out


def _assert_exactly_once_in_order(published: list[dict]) -> None:
    outbox = list(OutboxEvent.objects.order_by("id").values_list("event_id", "topic", "key"))
    ids = [e["event_id"] for e in published]
    assert len(ids) == len(set(ids)), "an event id was published twice"
    assert sorted(ids) == sorted(str(row[0]) for row in outbox), "published set != outbox"
    # Per order and topic, Kafka offsets follow outbox (commit) order.
    expected: dict[tuple[str, str], list[str]] = defaultdict(list)
    for event_id, topic, key in outbox:
        expected[(topic, key)].append(str(event_id))
    actual: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    for e in published:
        actual[(e["_topic"], e["_key"])].append((e["_offset"], e["event_id"]))
    for group, event_ids in expected.items():
        assert [eid for _, eid in sorted(actual[group])] == event_ids, group
    # All events of one order share one partition.
    partitions = defaultdict(set)
    for e in published:
        partitions[(e["_topic"], e["_key"])].add(e["_partition"])
    assert all(len(p) == 1 for p in partitions.values())


@pytest.mark.django_db(transaction=True)
def test_relay_publishes_each_event_once_in_order(kafka_topics):
    customer, restaurant = make_customer(), make_restaurant()
    make_courier()
    orders = [place(customer, restaurant) for _ in range(12)]
    for order in orders[::2]:
        for _ in range(5):
            services.advance_order(order.pk, by=SYSTEM)
    relay = Relay()
    relay._prepare_topics()
    total = 0
    while sent := relay.publish_batch():
        total += sent
    assert total == OutboxEvent.objects.count() == 12 * 2 + 6 * 5
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    assert relay.publish_batch() == 0  # nothing is sent twice
    _assert_exactly_once_in_order(_published_events())


@pytest.mark.django_db(transaction=True)
def test_relay_survives_a_broker_outage_and_replays_after_data_loss(
    kafka_broker, monkeypatch, tmp_path
):
    port = free_port()
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "outage.")
    broker = start_kafka(tmp_path / "first", port=port, log_name="test-kafka-outage.log")
    customer, restaurant = make_customer(), make_restaurant()
    make_courier()
    relay = Relay(delivery_timeout=1.5, max_backoff=0.5)
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"check_topics_every": 0.5})
    thread.start()
    try:
        first = [place(customer, restaurant) for _ in range(5)]
        _wait_drained()

        broker.kill()  # the broker dies, and its disk with it (a new node below)
        # The system of record keeps accepting writes while the broker is down.
        second = [place(customer, restaurant) for _ in range(5)]
        for order in first:
            services.advance_order(order.pk, by=SYSTEM)
        # It notices (a failed delivery, or a topic check that timed out: up to 3 s) and
        # retries with backoff, publishing nothing meanwhile.
        wait_until(lambda: relay.outages >= 1, 15, "the relay to notice the outage", interval=0.1)
        pending = OutboxEvent.objects.filter(published_at__isnull=True)
        assert pending.count() == 10 + 5

        broker = start_kafka(tmp_path / "second", port=port, log_name="test-kafka-outage.log")
        _wait_drained()
        for order in second:
            services.advance_order(order.pk, by=SYSTEM)
        _wait_drained()
        stop.set()  # the relay stopped, what the topics hold is all it will publish
        thread.join(10)
        assert not thread.is_alive()
        published = _published_events()
        assert len(published) == OutboxEvent.objects.count() == 10 * 2 + 10
        _assert_exactly_once_in_order(published)
        existing = kafka.admin().list_topics(timeout=3).topics
        assert {topic_name(t) for t in SOURCE_TOPICS} <= set(existing)
    finally:
        stop.set()
        thread.join(10)
        broker.stop()  # whichever broker is running, even when an assertion failed


def _outbox_drained() -> bool:
    return not OutboxEvent.objects.filter(published_at__isnull=True).exists()


def _wait_drained(timeout: float = 30.0) -> None:
    wait_until(_outbox_drained, timeout, "every outbox row published", interval=0.1)


@pytest.mark.django_db(transaction=True)
def test_a_record_the_broker_can_never_take_is_skipped_counted_and_the_rest_flow(
    kafka_topics,
):
    """The producer refuses a record half-way through a batch (here: over Kafka's 1 MB
    message limit). No retry can make it fit, so the relay stamps that row with the
    reason, counts it and carries on (it used to retry it forever, every row behind it
    waiting); the records around it go out once each, in order."""
    from datetime import UTC, datetime
    from uuid import uuid4

    from tracker.outbox.relay import SKIPPED_PREFIX

    customer, restaurant = make_customer(), make_restaurant()
    for _ in range(2):
        place(customer, restaurant)
    oversized = OutboxEvent.objects.create(
        event_id=uuid4(), topic=Topic.ORDERS.value, key="999",
        payload=b"x" * 1_100_000, event_time=datetime.now(tz=UTC),
    )  # fmt: skip
    place(customer, restaurant)
    relay = Relay(delivery_timeout=3.0, max_backoff=0.2)
    relay._prepare_topics()
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"check_topics_every": 0.5})
    thread.start()
    try:
        _wait_drained()
    finally:
        stop.set()
        thread.join(10)
    oversized.refresh_from_db()
    assert oversized.last_error.startswith(SKIPPED_PREFIX)
    assert "too large" in oversized.last_error.lower() and oversized.attempts == 1
    assert relay.skipped == {"MSG_SIZE_TOO_LARGE": 1} and relay.outages == 0
    oversized.delete()  # it was never published: the check below compares with the topics
    _assert_exactly_once_in_order(_published_events())
    assert relay.in_doubt == 0


@pytest.mark.django_db(transaction=True)
def test_records_whose_fate_the_broker_never_told_are_counted_as_in_doubt(
    kafka_broker, monkeypatch, tmp_path
):
    """The broker freezes with the relay's records in flight (SIGSTOP), then resumes and
    writes them. The relay could not know: it retried them with a new producer, so the topic
    holds them twice. Every such duplicate is one the relay counted in ``in_doubt`` and
    marked on its row; nothing is lost and each order's events keep their order."""
    import os
    import signal

    from confluent_kafka import KafkaException

    port = free_port()
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "frozen.")
    broker = start_kafka(tmp_path / "frozen", port=port, log_name="test-kafka-frozen.log")
    try:
        customer, restaurant = make_customer(), make_restaurant()
        relay = Relay(delivery_timeout=1.0, max_backoff=0.2)
        relay._prepare_topics()
        place(customer, restaurant)
        wait_until(lambda: _publish_or_retire(relay) > 0, 30, "a warm producer", interval=0.1)
        warm_doubts = relay.in_doubt
        for _ in range(3):
            place(customer, restaurant)
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(KafkaException):
                relay.publish_batch()
            relay._retire_producer()
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        doubted = relay.in_doubt - warm_doubts
        # 3 orders x (placed + status) were produced; those librdkafka had sent when the
        # broker froze are in doubt. One still in its local queue then (a busy machine) was
        # never written, so it is not: usually all 6, never none.
        assert 1 <= doubted <= 6
        assert OutboxEvent.objects.filter(last_error__startswith="in doubt").count() == doubted
        wait_until(
            lambda: _publish_or_retire(relay) == 0 and _outbox_drained(),
            30,
            "every outbox row published again",
            interval=0.1,
        )
        published = _published_events()
        ids = [e["event_id"] for e in published]
        duplicates = len(ids) - len(set(ids))
        assert 0 <= duplicates <= doubted  # each duplicate was announced
        assert set(ids) == {str(i) for i in OutboxEvent.objects.values_list("event_id", flat=True)}
        first_seen = {}
        for e in sorted(published, key=lambda e: (e["_topic"], e["_partition"], e["_offset"])):
            first_seen.setdefault(e["event_id"], e)
        _assert_exactly_once_in_order(list(first_seen.values()))
    finally:
        broker.stop()


def _publish_or_retire(relay: Relay) -> int:
    from confluent_kafka import KafkaException

    try:
        return relay.publish_batch()
    except KafkaException:
        relay._retire_producer()
        return -1

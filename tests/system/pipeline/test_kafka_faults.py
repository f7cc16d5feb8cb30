"""kill -9 of Apache Kafka in the middle of an order's journey, with a socket open on it.

The test runs its own broker (the session's serves every other test), with its log on
disk: killed without warning and started again over the same folder, it loses nothing
it acknowledged (``acks=all``). Meanwhile the system of record keeps taking changes;
the relay holds them in the outbox until the broker answers, then publishes them in
order; the open socket sees a gap, then every later status, never a wrong one.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from contract.events import Topic
from localrun.ports import free_port
from runtime.conf import KafkaConfig
from runtime.kafka import ensure_topics, read_topic
from tests.engines import start_kafka
from tests.factories import amake_world
from tests.fixtures_pinot import order_event_of
from tests.integration.live.test_live_push import WORLD, _connect
from tracker.orders import services
from tracker.orders.policy import SYSTEM
from tracker.outbox.models import OutboxEvent
from tracker.outbox.relay import Relay

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def _relay_all(relay: Relay) -> int:
    """Publish every row the outbox holds; how many the broker acknowledged."""
    total = 0
    while sent := relay.publish_batch():
        total += sent
    return total


async def _next_status(socket) -> str:
    """The next fast ``status`` message's status (enriched updates may come between)."""
    while True:
        message = await socket.receive_json_from(timeout=30)
        if message["type"] == "status":
            return message["status"]


async def test_a_killed_broker_restarted_loses_nothing_and_sockets_keep_receiving(
    pinot, monkeypatch, tmp_path
):
    world = await amake_world(**WORLD)
    order = world.order
    await pinot.apublish(order_event_of(order, 1))  # the snapshot's tracking row

    # From here on, this test's own broker: the relay, the bridge and the reads below.
    port = free_port()
    broker = start_kafka(tmp_path / "kafka", port=port, log_name="test-kafka-kill.log")
    try:
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
        monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "killed.")
        await asyncio.to_thread(ensure_topics, config=KafkaConfig())
        relay = Relay(delivery_timeout=2.0, max_backoff=0.2)
        socket, snapshot = await _connect(f"/ws/orders/{order.pk}/", world.tokens["alice"])
        assert snapshot["type"] == "snapshot"

        await database_sync_to_async(services.advance_order)(order.pk, by=SYSTEM)
        assert await asyncio.to_thread(_relay_all, relay) >= 1  # the placement's events too
        assert await _next_status(socket) == "ORDER_CONFIRMED"

        broker.kill()  # kill -9: no controlled shutdown, no flush beyond what was acked
        # The system of record goes on; the relay cannot publish and keeps the rows.
        await database_sync_to_async(services.advance_order)(order.pk, by=SYSTEM)
        with pytest.raises(Exception):  # noqa: B017 - any delivery failure will do
            await asyncio.to_thread(relay.publish_batch)
        unpublished = OutboxEvent.objects.filter(published_at__isnull=True).acount
        assert await unpublished() >= 1

        broker = start_kafka(tmp_path / "kafka", port=port, log_name="test-kafka-kill.log")
        await database_sync_to_async(services.advance_order)(order.pk, by=SYSTEM)
        deadline = asyncio.get_running_loop().time() + 60
        while await unpublished():
            assert asyncio.get_running_loop().time() < deadline, "the relay never caught up"
            try:
                await asyncio.to_thread(_relay_all, relay)
            except Exception:  # noqa: BLE001 - the producer may still see the old connection
                await asyncio.sleep(0.5)
        # The open socket: a gap while the broker was down, then every status in order.
        assert [await _next_status(socket), await _next_status(socket)] == [
            "BEING_PREPARED",
            "BEING_COOKED",
        ]
        await socket.disconnect()

        # Everything acknowledged before the kill is still in the log, once each, in order.
        records = await asyncio.to_thread(read_topic, Topic.ORDER_STATUSES, idle_timeout=0.5)
        statuses = [
            body["status"]
            for body in (json.loads(r.value) for r in records)
            if body["order_id"] == order.pk
        ]
        assert statuses[-3:] == ["ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED"]
        assert statuses.count("ORDER_CONFIRMED") == 1
    finally:
        broker.stop()

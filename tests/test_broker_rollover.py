"""The embedded broker's memory bound: a rollover loses nothing unread, and every client lives on.

The whole pipeline runs on a :class:`BoundedBroker` of its own (Tansu behind the
gate): relay, Spark job, Pinot stand-in, push bridge, the API's GPS producer. The
stream job is stopped so that GPS points sit unread in the log next to a dead
letter, the broker rolls over, and then: the unread points reach Pinot, the dead
letter is still there, a GPS point posted through the API and a status change reach
an open socket and Pinot, and no record appears twice.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from contract import kafka
from contract.conf import KafkaConfig
from contract.events import Topic, topic_name
from embedded.broker import BoundedBroker
from tests.conftest import free_port
from tests.test_pipeline_e2e import _api, _call, _people, _until
from tracker.orders import services
from tracker.outbox.models import OutboxEvent
from tracker.outbox.relay import Relay

pytestmark = [pytest.mark.spark, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bounded(kafka_broker, monkeypatch):
    """A bounded broker of this test's own; every client made from here on uses it."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")
    broker = BoundedBroker(KafkaConfig()).start(create_topics=False)
    # The API's GPS producer is per process: a fresh one, on this broker.
    monkeypatch.setattr(services, "telemetry", kafka.SharedProducer(**{"linger.ms": 2}))
    yield broker
    from tracker.live.bridge import stop_embedded_bridge

    stop_embedded_bridge()
    broker.stop()


def _values(topic: Topic) -> list[dict]:
    """The topic's JSON records (the malformed one this test sends is skipped)."""
    out = []
    for record in kafka.read_topic(topic, idle_timeout=0.5):
        try:
            out.append(json.loads(record.value))
        except ValueError:
            continue
    return out


async def test_a_rollover_carries_unread_gps_points_and_dead_letters_and_every_client_survives(
    bounded, spark, pinot, tmp_path
):
    from streaming.job import Settings, start_query

    settings = replace(Settings(), checkpoint_dir=str(tmp_path / "checkpoint"), available_now=False)
    query = start_query(spark, settings)
    stop = threading.Event()
    relay = Relay(delivery_timeout=3.0, max_backoff=0.5)
    relay_thread = threading.Thread(
        target=relay.run, args=(stop,), kwargs={"check_topics_every": 1}
    )
    relay_thread.start()
    socket = None
    try:
        people = await database_sync_to_async(_people)()
        customer, staff, courier = (
            _api(people["tokens"][r]) for r in ("customer", "staff", "courier")
        )
        products = people["products"]
        placed = await _call(customer, "post", "/api/v1/orders/", {
            "restaurant_id": people["restaurant"].pk,
            "items": [{"product_id": products[0].pk, "quantity": 1}],
            "delivery": {"address": "1 Church St", "lat": 12.9750, "lon": 77.6050},
        })  # fmt: skip
        detail = f"/api/v1/orders/{placed['id']}/"
        for _ in range(4):  # to OUT_FOR_DELIVERY
            await _call(staff, "post", f"{detail}advance/")
        await _call(courier, "post", f"{detail}locations/", {"lat": 12.9700, "lon": 77.6400})
        # A record the job cannot take: it becomes a dead letter (nobody reads that topic).
        producer = kafka.producer()
        producer.produce(
            topic_name(Topic.DELIVERY_LOCATIONS), b"{not json", str(placed["id"]).encode()
        )
        producer.flush(10)

        async def on_the_road():
            body = await _call(customer, "get", detail)
            return body["tracking"]["source"] == "pinot" and body["position"] is not None

        await _until(on_the_road, what="the order on the road in Pinot")
        await _until(lambda: asyncio.to_thread(_values, Topic.DEAD_LETTERS), what="a dead letter")
        dead_before = await asyncio.to_thread(_values, Topic.DEAD_LETTERS)

        # GPS points the stream job has not read when the broker rolls over.
        query.stop()
        unread = [(12.9720, 77.6200), (12.9745, 77.6080)]
        for lat, lon in unread:
            await _call(courier, "post", f"{detail}locations/", {"lat": lat, "lon": lon})
        socket = WebsocketCommunicator(
            application, f"/ws/orders/{placed['id']}/",
            headers=[(b"authorization", f"Token {people['tokens']['customer']}".encode())],
        )  # fmt: skip
        assert (await socket.connect(timeout=30))[0]
        snapshot = await socket.receive_json_from(timeout=30)
        assert snapshot["type"] == "snapshot"

        carried = await database_sync_to_async(bounded.rollover)()
        assert carried[topic_name(Topic.DELIVERY_LOCATIONS)] >= len(unread)
        assert carried[topic_name(Topic.DEAD_LETTERS)] == len(dead_before)

        query = start_query(spark, settings)  # resumes from its checkpoint

        async def at(position, status=None):
            body = await _call(customer, "get", detail)
            where = body["position"] and (body["position"]["lat"], body["position"]["lon"])
            return where == position and (status is None or body["status"] == status)

        await _until(lambda: at(unread[-1]), what="the unread points in Pinot")

        # The API's GPS producer and the relay both lost their broker's state: both recover.
        last = (12.9748, 77.6060)
        await _call(courier, "post", f"{detail}locations/", {"lat": last[0], "lon": last[1]})
        await _call(courier, "post", f"{detail}advance/")
        seen_status, seen_position = None, None
        while seen_status != "ARRIVING_AT_DOOR" or seen_position != last:
            message = await socket.receive_json_from(timeout=60)
            if message["type"] != "update":
                continue
            seen_status = message.get("status", seen_status)
            if message.get("position"):
                seen_position = (message["position"]["lat"], message["position"]["lon"])
        await _until(lambda: at(last, "ARRIVING_AT_DOOR"), what="the new point and status in Pinot")

        # The dead letter survived; nothing was written twice: no GPS point, and no outbox
        # event (the relay did not replay the outbox, as after a crash, nor resend one).
        assert await asyncio.to_thread(_values, Topic.DEAD_LETTERS) == dead_before
        points = await asyncio.to_thread(_values, Topic.DELIVERY_LOCATIONS)
        ids = [p["event_id"] for p in points if "event_id" in p]
        assert len(ids) == len(set(ids)) >= len(unread) + 1
        outbox = await database_sync_to_async(OutboxEvent.objects.count)()
        assert relay.published_total == outbox and relay.in_doubt == 0
    finally:
        if socket is not None:
            await socket.disconnect()
        stop.set()
        relay_thread.join(10)
        query.stop()

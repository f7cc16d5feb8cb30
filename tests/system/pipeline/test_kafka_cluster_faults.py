"""kill -9 of a partition's leader in a three-node Kafka cluster, in the middle of an
order's journey (issue 54's first fault; the fault drill, bench/scenarios/fault_drill.py,
does the same to the whole replicated cluster under load).

The test runs a cluster of its own (the suite's broker and Pinot serve every other test
and are left alone): three KRaft nodes with the settings docker-compose.cluster.yml
gives every node, and the product's topics with three replicas and
``min.insync.replicas=2``, as the cluster's ``kafka-topics`` creates them. The relay,
the push bridge, the stream job (a continuous query) and the order's socket all use it.
Once the order is confirmed, the node leading the order's ``order_statuses`` partition
is killed without warning, and the journey goes on through the API: the kitchen moves
it on (the relay's producer, acks=all and idempotent, reaches the new leader), the
courier posts GPS points (the API's producer; a 503 while no leader answers is retried,
as the app does) and delivers it. Afterwards every event of the order has come out of
the pipeline, on the enriched topics (the suite's Pinot consumes the suite's broker, not
this cluster): its status times equal the database's, its last point, each item line
(a line written again by a re-run batch carries the same id, which Pinot keeps once),
no dead letter; every status reached the socket, none twice, none out of order.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import replace

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from bench.harness import socket_verdict
from config.asgi import application
from contract.events import LIFECYCLE, Topic, epoch_ms, status_time_field, topic_name
from localrun.compose.file import CLUSTER_FILE, COMPOSE_FILE, load_project, service_env
from localrun.kafka import KafkaBroker, image_properties, start_all
from runtime import kafka
from runtime.conf import KafkaConfig
from tests.integration.config.test_cluster_topology import COMPOSE_VARS
from tests.integration.streaming.test_pipeline_e2e import READ_EVERY, _call, _place_order
from tests.integration.streaming.test_streaming_job import latest, outputs
from tests.waiting import wait_until, wait_until_async
from tracker.operations.pipeline import PipelineMonitor
from tracker.operations.replicas import partitions_out_of_sync
from tracker.orders.models import OrderItem, OrderStatusChange
from tracker.orders.services import locations
from tracker.outbox.relay import Relay

pytestmark = [pytest.mark.spark, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

#: A node's own settings, which KafkaBroker.cluster gives each node of this test.
NODE_OWN = frozenset(
    {"node.id", "controller.quorum.voters", "listeners", "advertised.listeners", "log.dirs"}
)


def cluster_settings() -> dict[str, str]:
    """What docker-compose.cluster.yml sets on every Kafka node (min.insync.replicas, the
    replication of the brokers' own topics), as the image reads its environment."""
    variables = {**COMPOSE_VARS, "REDIS_PASSWORD": "test-only-redis-password"}
    node = load_project(variables, [COMPOSE_FILE, CLUSTER_FILE]).services["kafka"]
    return {k: v for k, v in image_properties(service_env(node)).items() if k not in NODE_OWN}


@pytest.fixture
def kafka_cluster(pinot, kafka_nodes):
    """:func:`kafka_nodes`; reads still go to the suite's Pinot, which does not hold this
    order: the API answers from the database."""
    return kafka_nodes


@pytest.fixture
def kafka_nodes(tmp_path, monkeypatch):
    """Three nodes of this test's own, the product's topics on them with three replicas
    and two in sync, and this test's clients pointed at them."""
    settings = cluster_settings()
    assert settings["min.insync.replicas"] == "2"
    assert settings["offsets.topic.replication.factor"] == "3"
    brokers = KafkaBroker.cluster(tmp_path / "kafka", 3, settings)
    for broker in brokers:
        broker.heap = "256m"  # four brokers on the machine during make test
    start_all(brokers)
    try:
        monkeypatch.setenv(
            "KAFKA_BOOTSTRAP_SERVERS", ",".join(b.bootstrap_servers for b in brokers)
        )
        monkeypatch.setenv("KAFKA_TOPIC_PREFIX", f"cluster{uuid.uuid4().hex[:8]}.")
        monkeypatch.setenv("KAFKA_REPLICATION_FACTOR", "3")
        monkeypatch.setenv("KAFKA_MIN_INSYNC_REPLICAS", "2")
        kafka.ensure_topics(config=KafkaConfig(), timeout=60)
        # Topics with leaders are not yet whole: a node that started last may still be
        # catching up, its replicas out of sync (seen in CI, 2026-12-08: the monitor's
        # first sample, before any kill, counted one missing). Every test starts whole.
        names = [topic_name(t) for t in Topic if t is not Topic.DEAD_LETTERS]
        wait_until(
            lambda: partitions_out_of_sync(kafka.admin().list_topics(timeout=10), names) == 0,
            60, "every replica of the cluster in sync",
        )  # fmt: skip
        # The API's GPS producer is made once per process, for the suite's broker.
        monkeypatch.setattr(
            locations, "telemetry", kafka.SharedProducer(**locations.telemetry.overrides)
        )
        yield brokers
    finally:
        for broker in brokers:
            # Throwaway data: no controlled shutdown, which the last node of a quorum
            # that lost two would wait out (30 s) before being killed anyway.
            broker.kill()


@pytest.fixture
def pipeline(spark, kafka_cluster, tmp_path):
    """The relay and a continuous stream job on the cluster (the test's lifespan starts
    the push bridge on it)."""
    from streaming.job import start_query
    from streaming.settings import Settings

    query = start_query(
        spark, replace(Settings(), checkpoint_dir=str(tmp_path / "checkpoint"), available_now=False)
    )
    stop = threading.Event()
    relay = threading.Thread(target=Relay().run, args=(stop,), kwargs={"check_topics_every": 5.0})
    relay.start()
    try:
        yield kafka_cluster
    finally:
        stop.set()
        relay.join(30)
        query.stop()


def _partition_of(order_id: int) -> int:
    """The partition of ``order_statuses`` holding the order's events (keyed by order id)."""
    for record in kafka.read_topic(Topic.ORDER_STATUSES, idle_timeout=0.5):
        if json.loads(record.value)["order_id"] == order_id:
            return record.partition
    raise AssertionError(f"no status event of order {order_id} in the topic")


def _leader(partition: int) -> int:
    topic = topic_name(Topic.ORDER_STATUSES)
    metadata = kafka.admin().list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def _new_leader(partition: int, old: int, timeout: float = 90.0) -> int:
    """The leader the controller elects among the nodes still running (node ids start at 1;
    -1 is no leader)."""
    return wait_until(
        lambda: (now := _leader(partition)) not in (-1, old) and now,
        timeout,
        f"a new leader of partition {partition} after the kill",
        ignoring=Exception,  # the admin client may still ask the dead node
    )


def _truth(order_id: int) -> dict:
    changes = OrderStatusChange.objects.filter(order_id=order_id).values_list(
        "status", "changed_at"
    )
    return {
        "times": {status: epoch_ms(at) for status, at in changes},
        "lines": OrderItem.objects.filter(order_id=order_id).count(),
    }


async def _post_point(client, path: str, point: tuple[float, float]) -> int:
    """As the courier app does: a 503 (the broker did not acknowledge in time) is sent
    again; points are idempotent. How many tries it took."""
    deadline = time.monotonic() + 60
    for tries in range(1, 1000):
        response = await database_sync_to_async(client.post)(
            f"{path}locations/", {"lat": point[0], "lon": point[1]}, format="json"
        )
        if response.status_code == 202:
            return tries
        assert response.status_code == 503, (response.status_code, response.content[:300])
        assert time.monotonic() < deadline, "GPS points refused for 60 s"
        await asyncio.sleep(1)
    raise AssertionError("unreachable")


async def test_a_killed_partition_leader_loses_no_event_of_an_order_on_its_way(
    pipeline, asgi_lifespan
):
    brokers = pipeline
    order_id, tokens, (customer, staff, courier) = await _place_order()
    path = f"/api/v1/orders/{order_id}/"

    socket = WebsocketCommunicator(
        application,
        f"/ws/orders/{order_id}/",
        headers=[(b"authorization", f"Token {tokens['customer']}".encode())],
    )
    assert (await socket.connect(timeout=30))[0]
    loop = asyncio.get_running_loop()
    log: list[tuple[float, int, dict]] = []

    async def shown(status: str, timeout: float = 90.0) -> None:
        """Read the socket until it has shown ``status`` (a fast ``status`` or an update)."""
        deadline = loop.time() + timeout
        while not any(m.get("status") == status for _, _, m in log if m["type"] != "snapshot"):
            left = deadline - loop.time()
            seen = [m.get("status") for _, _, m in log]
            assert left > 0, f"{status} not on the socket in {timeout:.0f} s; it showed {seen}"
            try:
                message = await socket.receive_json_from(timeout=left)
            except TimeoutError:
                continue
            if message["type"] not in ("heartbeat", "pong"):
                log.append((loop.time(), 1, message))

    snapshot = await socket.receive_json_from(timeout=30)
    assert snapshot["type"] == "snapshot" and snapshot["order"]["status"] == "PLACED_ORDER"
    log.append((loop.time(), 1, snapshot))
    await _call(staff, "post", f"{path}advance/")
    await shown("ORDER_CONFIRMED")

    # The node leading the order's partition dies without warning (no controlled
    # shutdown, no leadership handed over).
    partition = await asyncio.to_thread(_partition_of, order_id)
    old = await asyncio.to_thread(_leader, partition)
    victim = next(b for b in brokers if b.node_id == old)
    victim.kill()

    # The journey goes on at once: the kitchen, then the courier on the road.
    for _ in LIFECYCLE[2:5]:  # BEING_PREPARED .. OUT_FOR_DELIVERY
        await _call(staff, "post", f"{path}advance/")
    route = [(12.9700, 77.6400), (12.9720, 77.6200), (12.9745, 77.6080)]
    for point in route:
        await _post_point(courier, path, point)
    for _ in LIFECYCLE[5:]:  # ARRIVING_AT_DOOR, DELIVERED
        await _call(courier, "post", f"{path}advance/")
    new = await asyncio.to_thread(_new_leader, partition, old)
    assert new != old
    # The monitor's ReplicasMissing figure: the dead node's partitions are out of sync.
    names = [topic_name(t) for t in Topic if t is not Topic.DEAD_LETTERS]
    metadata = await asyncio.to_thread(kafka.admin().list_topics, timeout=10)
    assert partitions_out_of_sync(metadata, names) > 0

    # The socket: every status, once, in order (the fast path and the enriched one).
    await shown("DELIVERED", timeout=120)
    await socket.disconnect()
    verdict = socket_verdict(log, [s.value for s in LIFECYCLE])
    assert (verdict["missed"], verdict["twice"], verdict["out_of_order"]) == ([], [], []), log

    # The pipeline: everything the order went through, on the enriched topics.
    truth = await database_sync_to_async(_truth)(order_id)
    assert set(truth["times"]) == {s.value for s in LIFECYCLE}

    async def complete() -> dict | None:
        rows = await asyncio.to_thread(outputs, Topic.ORDERS_ENRICHED)
        final = latest([r for r in rows if r["order_id"] == order_id]).get(order_id)
        done = final and final["status"] == "DELIVERED"
        return final if done and (final["courier_lat"], final["courier_lon"]) == route[-1] else None

    final = await wait_until_async(
        complete, 120, "the delivered order with its last point", interval=READ_EVERY
    )
    assert {s: final[status_time_field(s)] for s in truth["times"]} == truth["times"]
    lines = [r for r in await asyncio.to_thread(outputs, Topic.ORDER_ITEMS_ENRICHED)
             if r["order_id"] == order_id]  # fmt: skip
    assert sorted({r["line"] for r in lines}) == list(range(1, truth["lines"] + 1))
    assert len({(r["line"], r["event_id"]) for r in lines}) == truth["lines"]  # any copy: same id
    # Every point the API acknowledged is in Kafka. The job wrote a delivery status for a
    # point only if the order was still on the road at the end of that point's micro-batch
    # (one that also held DELIVERED writes none), and never one of another point.
    sent = {(r["lat"], r["lon"]) for r in map(json.loads, (
        record.value for record in await asyncio.to_thread(
            kafka.read_topic, Topic.DELIVERY_LOCATIONS, idle_timeout=0.5)
    )) if r["order_id"] == order_id}  # fmt: skip
    assert sent == set(route)
    points = {(r["lat"], r["lon"]) for r in await asyncio.to_thread(outputs, Topic.DELIVERY_STATUSES)
              if r["order_id"] == order_id}  # fmt: skip
    assert points <= set(route)
    # Each status event once (a resend of one whose acknowledgement was lost keeps its id).
    sources: dict[str, set[str]] = {}
    for record in await asyncio.to_thread(kafka.read_topic, Topic.ORDER_STATUSES, idle_timeout=0.5):
        event = json.loads(record.value)
        if event["order_id"] == order_id:
            sources.setdefault(event["status"], set()).add(event["event_id"])
    assert {status: len(ids) for status, ids in sources.items()} == {s.value: 1 for s in LIFECYCLE}
    assert await asyncio.to_thread(outputs, Topic.DEAD_LETTERS) == []


def _gauge(name: str, **labels: str) -> float | None:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels)


async def test_the_monitor_reports_replicas_missing_not_kafka_down_when_one_node_dies(kafka_nodes):
    """The drill's finding: for the seconds before the cluster fences a killed node, the
    node still leads its partitions, and the monitor said "kafka unreachable"
    (``ordertrack_dependency_up`` 0, every Kafka stage "broker: ...") instead of
    ReplicasMissing, though two nodes of three answer. Sampled at once after the kill."""
    monitor = PipelineMonitor()
    await asyncio.to_thread(monitor.sample)
    assert _gauge("ordertrack_dependency_up", dependency="kafka") == 1
    assert _gauge("ordertrack_replicas_missing", store="kafka") == 0
    kafka_nodes[0].kill()
    await asyncio.to_thread(monitor.sample)
    stages = monitor.snapshot()["stages"]
    assert _gauge("ordertrack_dependency_up", dependency="kafka") == 1
    assert _gauge("ordertrack_replicas_missing", store="kafka") > 0
    assert not [s for s in stages if (s.get("error") or "").startswith("broker:")], stages

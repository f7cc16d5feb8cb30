"""Integration tests: real SparkSession, real embedded broker, the job end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from streaming import join
from streaming.kafka_source import KafkaPartition, KafkaStreamReader
from tests.test_streaming_join import T0, full_lifecycle, placed, point, status
from tracker.core.conf import BASE_DIR
from tracker.core.events import OrderStatus, Topic, topic_name
from tracker.core.kafka import producer, publish, read_topic


def send(events, *, raw: list[tuple[Topic, bytes]] = ()) -> None:
    """Publish with linger so Tansu under-reports the watermark (the reader must cope)."""
    prod = producer(**{"linger.ms": 50})
    for ev in events:
        publish(prod, ev)
    for topic, value in raw:
        prod.produce(topic_name(topic), key=b"1", value=value)
    assert prod.flush(10) == 0


def outputs(topic: Topic) -> list[dict]:
    return [json.loads(r.value) for r in read_topic(topic, idle_timeout=0.5)]


def expected(events) -> dict[Topic, list[dict]]:
    """What the pure join emits for ``events`` fed as one batch (ids/times are deterministic)."""
    recs = [join.SourceRecord(e.TOPIC, 0, i, e.key(), e.to_json()) for i, e in enumerate(events)]
    result = join.process_batch({}, recs, 0)
    out: dict[Topic, list[dict]] = {}
    for o in result.outputs:
        out.setdefault(o.topic, []).append(o.decoded())
    return out


def by_key(rows: list[dict], *fields: str) -> dict[tuple, dict]:
    return {tuple(r[f] for f in fields): r for r in rows}


@pytest.mark.spark
@pytest.mark.parametrize("reader", ["driver", "partitioned"])
def test_events_in_exact_enriched_records_out_and_restart_loses_nothing(
    run_stream, kafka_topics, reader
):
    first = full_lifecycle(order_id=101) + [
        placed(102),
        status(OrderStatus.ORDER_CONFIRMED, T0 + 5, 102),
    ]
    bad = b'{"schema_version": 1, "order_id": "x"}'
    send(first, raw=[(Topic.ORDER_STATUSES, bad)])
    run_stream(python_reader=reader)

    enriched = outputs(Topic.ORDERS_ENRICHED)
    want = expected(first)
    assert by_key(enriched, "order_id", "version") == by_key(
        want[Topic.ORDERS_ENRICHED], "order_id", "version"
    )
    last_101 = max((e for e in enriched if e["order_id"] == 101), key=lambda e: e["version"])
    assert last_101["status"] == "DELIVERED" and last_101["delivered_at"] is not None
    deliveries = outputs(Topic.DELIVERY_STATUSES)
    assert by_key(deliveries, "order_id", "version") == by_key(
        want[Topic.DELIVERY_STATUSES], "order_id", "version"
    )
    assert len(deliveries) == 3
    items = outputs(Topic.ORDER_ITEMS_ENRICHED)
    assert sorted((i["order_id"], i["line"]) for i in items) == [
        (101, 1),
        (101, 2),
        (102, 1),
        (102, 2),
    ]
    (dead,) = outputs(Topic.DEAD_LETTERS)
    assert dead["source_topic"] == "order_statuses" and "event_id" in dead["reason"]

    # Restart on the same checkpoint with new input: resumes, no loss, no new duplicates.
    second = [
        status(OrderStatus.BEING_PREPARED, T0 + 10, 102),
        status(OrderStatus.ORDER_CONFIRMED, T0 + 5, 102),  # duplicate of an old event
        placed(103),
    ]
    send(second)
    run_stream(python_reader=reader)
    enriched = outputs(Topic.ORDERS_ENRICHED)
    counts = Counter((e["order_id"], e["version"]) for e in enriched)
    assert max(counts.values()) == 1, "an (order_id, version) was emitted twice"
    latest = {}
    for e in enriched:
        if e["version"] > latest.get(e["order_id"], {"version": 0})["version"]:
            latest[e["order_id"]] = e
    assert latest[102]["status"] == "BEING_PREPARED" and latest[102]["version"] == 3
    assert latest[103]["version"] == 1
    assert len(outputs(Topic.ORDER_ITEMS_ENRICHED)) == 6

    # A third run with nothing new emits nothing.
    before = len(enriched)
    run_stream(python_reader=reader)
    assert len(outputs(Topic.ORDERS_ENRICHED)) == before


@pytest.mark.spark
def test_batches_split_across_runs_match_one_batch(run_stream, kafka_topics):
    """Events of one order spread over several runs (buffering across batches included)."""
    evs = full_lifecycle(order_id=201)
    send([e for e in evs if not isinstance(e, type(evs[0]))])  # statuses and points first
    run_stream()
    assert outputs(Topic.ORDERS_ENRICHED) == []
    send([evs[0]])  # the order arrives last
    run_stream()
    enriched = outputs(Topic.ORDERS_ENRICHED)
    (only,) = enriched
    assert only["status"] == "DELIVERED" and only["version"] == len(evs)
    assert only["location_time"] == max(
        e.event_time for e in evs if e.TOPIC is Topic.DELIVERY_LOCATIONS
    )


def test_source_replays_a_partition_whose_topic_was_reset():
    """A checkpoint offset beyond the true end means the in-memory broker restarted."""
    reader = KafkaStreamReader.__new__(KafkaStreamReader)
    parts = reader.partitions({"t": {"0": 50, "1": 5}}, {"t": {"0": 20, "1": 9}})
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 0, 20), (1, 5, 9)]
    assert all(isinstance(p, KafkaPartition) for p in parts)
    # New partitions start at 0; empty ranges are skipped.
    parts = reader.partitions({"t": {"0": 3}}, {"t": {"0": 3, "1": 2}})
    assert [(p.partition, p.start, p.end) for p in parts] == [(1, 0, 2)]


@pytest.mark.spark
def test_python_m_streaming_prints_ready_and_processes(kafka_topics, tmp_path):
    send([placed(301), point(T0 + 1, 0.1, order_id=301)])
    env = {
        **os.environ,
        "STREAMING_CHECKPOINT_DIR": str(tmp_path / "cp"),
        "PYTHONPATH": str(BASE_DIR),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "streaming", "--available-now"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "streaming: ready" in proc.stdout
    assert "streaming: batch=0 rows=2" in proc.stderr
    placed_v1, located_v2 = sorted(outputs(Topic.ORDERS_ENRICHED), key=lambda e: e["version"])
    assert (placed_v1["version"], located_v2["version"]) == (1, 2)
    enriched = located_v2
    assert enriched["order_id"] == 301 and enriched["location_time"] == T0 + 1
    assert str(uuid.UUID(enriched["event_id"])) == enriched["event_id"]

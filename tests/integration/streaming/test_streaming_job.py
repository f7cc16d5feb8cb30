"""Integration tests: real SparkSession, Apache Kafka, Spark's Kafka connector, the job end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections import Counter

import pytest
from py4j.protocol import Py4JJavaError

from contract.events import OrderStatus, Topic, now_ms, topic_name
from runtime.conf import BASE_DIR
from runtime.kafka import producer, publish, read_topic
from streaming.checkpoint import CheckpointError
from streaming.session import CHECKPOINT_FILE_MANAGER, TRIGGER_EXECUTOR
from tests.integration.streaming.test_streaming_enrich import (
    T0,
    full_lifecycle,
    placed,
    point,
    run_batch,
    status,
)


def send(events, *, raw: list[tuple[Topic, bytes]] = ()) -> None:
    """Publish in batches (a linger), as the relay and the simulator do."""
    prod = producer(**{"linger.ms": 50})
    for ev in events:
        publish(prod, ev)
    for topic, value in raw:
        prod.produce(topic_name(topic), key=b"1", value=value)
    assert prod.flush(10) == 0


def outputs(topic: Topic) -> list[dict]:
    return [json.loads(r.value) for r in read_topic(topic, idle_timeout=0.5)]


def latest(rows: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in rows:
        if r["version"] > out.get(r["order_id"], {"version": 0})["version"]:
            out[r["order_id"]] = r
    return out


@pytest.mark.spark
def test_stream_outputs_equal_the_batch_plan_and_a_restart_loses_nothing(spark, run_stream):
    first = full_lifecycle(order_id=101) + [
        placed(102),
        status(OrderStatus.ORDER_CONFIRMED, T0 + 5, 102),
    ]
    bad = b'{"schema_version": 1, "order_id": "x"}'
    send(first, raw=[(Topic.ORDER_STATUSES, bad)])
    progress = run_stream()

    want = run_batch(spark, first)
    enriched = outputs(Topic.ORDERS_ENRICHED)
    # One micro-batch held everything: exactly the batch plan's records.
    assert sorted(map(json.dumps, enriched)) == sorted(map(json.dumps, want[Topic.ORDERS_ENRICHED]))
    assert latest(enriched)[101]["status"] == "DELIVERED"
    assert outputs(Topic.DELIVERY_STATUSES) == want[Topic.DELIVERY_STATUSES] == []  # delivered
    items = outputs(Topic.ORDER_ITEMS_ENRICHED)
    assert sorted((i["order_id"], i["line"]) for i in items) == [
        (101, 1),
        (101, 2),
        (102, 1),
        (102, 2),
    ]
    (dead,) = outputs(Topic.DEAD_LETTERS)
    assert dead["source_topic"] == "order_statuses" and "event_id" in dead["reason"]
    # The join state, which Spark scans whole every batch, keeps one row per order and
    # per dead letter; the lines are written from their order's row, not kept.
    assert progress["stateOperators"][0]["numRowsTotal"] == 3

    # Restart on the same checkpoint with new input: the state was kept.
    second = [
        status(OrderStatus.BEING_PREPARED, T0 + 10, 102),
        status(OrderStatus.ORDER_CONFIRMED, T0 + 5, 102),  # duplicate of an old event
        placed(103),
    ]
    send(second)
    run_stream()
    enriched = outputs(Topic.ORDERS_ENRICHED)
    counts = Counter((e["order_id"], e["version"]) for e in enriched)
    assert max(counts.values()) == 1, "an (order_id, version) was emitted twice"
    now = latest(enriched)
    assert now[102]["status"] == "BEING_PREPARED" and now[102]["version"] == 4
    assert now[102]["order_confirmed_at"] == T0 + 5
    assert now[103]["version"] == 1
    assert len(outputs(Topic.ORDER_ITEMS_ENRICHED)) == 6

    # A third run with nothing new emits nothing.
    before = len(enriched)
    run_stream()
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
    (only,) = outputs(Topic.ORDERS_ENRICHED)
    assert only["status"] == "DELIVERED" and only["version"] == len(evs)
    # Its lines are written in the batch that brought the order event, and only then.
    lines = sorted((i["order_id"], i["line"]) for i in outputs(Topic.ORDER_ITEMS_ENRICHED))
    assert lines == [(201, 1), (201, 2)]
    assert only["location_time"] == max(
        e.event_time for e in evs if e.TOPIC is Topic.DELIVERY_LOCATIONS
    )


@pytest.mark.spark
def test_a_month_ahead_placed_at_is_a_dead_letter_and_never_moves_the_watermark(run_stream):
    """The record that froze tracking: its watermark column a month ahead. It must be
    dead-lettered before the watermark sees it, so a later ordinary order still flows,
    also after a restart on the same checkpoint (the watermark is in the checkpoint)."""
    month = 30 * 24 * 3_600_000
    poison = dataclasses.replace(
        status(OrderStatus.ORDER_CONFIRMED, now_ms(), order_id=301), placed_at=now_ms() + month
    )
    send([poison])
    run_stream()
    (dead,) = outputs(Topic.DEAD_LETTERS)
    assert dead["reason"] == "invalid placed_at: must not be after event_time"
    send([placed(302), status(OrderStatus.ORDER_CONFIRMED, T0 + 5, 302)])
    run_stream()
    (after,) = latest(outputs(Topic.ORDERS_ENRICHED)).values()
    assert after["order_id"] == 302 and after["status"] == "ORDER_CONFIRMED"
    assert len(outputs(Topic.ORDER_ITEMS_ENRICHED)) == 2


@pytest.mark.spark
def test_a_rebuild_from_the_topics_writes_the_same_records(run_stream, tmp_path):
    """``--reprocess`` runs the job from offset 0 into fresh state: the replay writes
    byte-identical records (same ids, same versions), which Pinot's upsert takes over
    whatever a wrong run left under the same version (tests/integration/pinot/test_real_pinot.py)."""
    from tests.fixtures_pinot import order_event

    evs = full_lifecycle(order_id=401)
    send(evs)
    run_stream()
    first = [r.value for r in read_topic(Topic.ORDERS_ENRICHED, idle_timeout=0.5)]
    # What a faulty earlier job might have written under the final version.
    wrong = order_event(401, len(evs), "CANCELLED")
    prod = producer()
    publish(prod, wrong)
    assert prod.flush(10) == 0
    run_stream(checkpoint=tmp_path / "rebuild")  # what --reprocess does
    replayed = [r.value for r in read_topic(Topic.ORDERS_ENRICHED, idle_timeout=0.5)]
    assert replayed == first + [wrong.to_json()] + first


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
    assert "streaming: batch=0 rows=2 " in proc.stderr, proc.stderr[-2000:]
    assert "state_rows=1 " in proc.stderr  # the order; its two lines are written, not kept
    assert re.search(r"state_rows=1 .* state_evict_ms=\d+", proc.stderr)  # the watermark's scan
    assert len(outputs(Topic.ORDER_ITEMS_ENRICHED)) == 2
    (enriched,) = outputs(Topic.ORDERS_ENRICHED)
    assert enriched["version"] == 2
    assert enriched["order_id"] == 301 and enriched["location_time"] == T0 + 1
    assert str(uuid.UUID(enriched["event_id"])) == enriched["event_id"]


@pytest.mark.spark
def test_a_checkpoint_whose_state_is_gone_is_refused_not_resumed_empty(run_stream, tmp_path):
    send([placed(601)])
    run_stream(checkpoint=tmp_path / "cp")
    shutil.rmtree(tmp_path / "cp" / "spark" / "state")
    with pytest.raises(CheckpointError, match="committed batches but no join state"):
        run_stream(checkpoint=tmp_path / "cp")


@pytest.mark.spark
def test_the_checkpoint_is_renamed_into_place_with_its_checksum_and_never_overwritten(
    spark, tmp_path
):
    """The job's checkpoint goes through Hadoop's FileSystem API (rename(2) per file, no
    `readlink` process per path as with FileContext), still atomic and checksummed, and a
    second writer of a batch's entry is refused as Spark's logs need."""
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    managers = getattr(
        jvm.org.apache.spark.sql.execution.streaming.checkpointing, "CheckpointFileManager$"
    )
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = getattr(managers, "MODULE$").create(hadoop_path(str(tmp_path)), conf)
    assert manager.getClass().getName() == CHECKPOINT_FILE_MANAGER

    def write(name: str, body: bytes) -> None:
        out = manager.createAtomic(hadoop_path(str(tmp_path / name)), False)
        out.write(bytearray(body))
        out.close()

    write("7", b'v1\n{"batchWatermarkMs":0}')
    assert (tmp_path / "7").read_bytes() == b'v1\n{"batchWatermarkMs":0}'
    assert sorted(p.name for p in tmp_path.iterdir()) == [".7.crc", "7"]  # no temporary left
    with pytest.raises(Py4JJavaError, match="already exists"):
        write("7", b"v1\n{}")
    assert (tmp_path / "7").read_bytes() == b'v1\n{"batchWatermarkMs":0}'


def _reaped_children_faults(pid: int) -> int:
    """Page faults of every child ``pid`` has waited for (``cminflt``, /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return int(fields[8])  # field 11 of proc(5); the split starts at field 3


@pytest.mark.spark
def test_the_embedded_checkpoint_sets_file_permissions_without_starting_a_process(spark, tmp_path):
    """Hadoop's local file system, without its native library, starts a `chmod` process
    for every file it creates; the embedded job's (localrun/java) sets the bits in the
    JVM, with the same result."""
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    ours = hadoop_path(f"file://{tmp_path}").getFileSystem(conf)
    assert ours.getClass().getName() == "ordertrack.NioLocalFileSystem"
    hadoops = jvm.org.apache.hadoop.fs.LocalFileSystem()
    hadoops.initialize(hadoop_path("file:///").toUri(), conf)
    pid = jvm.java.lang.ProcessHandle.current().pid()

    def create(fs, name: str) -> int:
        """The children's page faults while ``fs`` creates ten files."""
        before = _reaped_children_faults(pid)
        for i in range(10):
            fs.create(hadoop_path(str(tmp_path / f"{name}-{i}")), True).close()
        return _reaped_children_faults(pid) - before

    assert create(hadoops, "hadoop") > 0  # the probe sees Hadoop's chmod processes
    assert create(ours, "ours") == 0
    for name in ("hadoop-3", "ours-3", ".ours-3.crc"):  # 0666 less Hadoop's umask, 022
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    ours.setPermission(hadoop_path(str(tmp_path / "ours-3")), permission(0o640))
    assert (tmp_path / "ours-3").stat().st_mode & 0o777 == 0o640


@pytest.mark.spark
def test_the_classes_the_job_configures_by_name_exist_in_this_spark(spark):
    """A class named in a setting or a log level fails silently when Spark moves it (its
    trigger executor moved to a `runtime` package in 4.x and its warning came back)."""
    for name in (CHECKPOINT_FILE_MANAGER, TRIGGER_EXECUTOR):
        spark._jvm.java.lang.Class.forName(name)
    assert (
        spark._jvm.org.apache.logging.log4j.LogManager.getLogger(TRIGGER_EXECUTOR)
        .getLevel()
        .toString()
        == "ERROR"
    )


@pytest.mark.spark
def test_records_retention_deleted_before_the_job_read_them_are_reported_then_skipped(
    run_stream, tmp_path
):
    """A ``make run`` stopped longer than Kafka's retention: the log's start moved past
    where the checkpoint resumes. The job says which records it never read; production's
    ``failOnDataLoss`` stops on them, ``make run``'s setting skips them and goes on.
    (DeleteRecords moves the log's start exactly as retention does, without waiting for
    the broker's retention check.)"""
    from confluent_kafka import TopicPartition

    from runtime.kafka import admin, consumer, end_offsets
    from streaming.checkpoint import retention_losses
    from streaming.settings import Settings

    checkpoint = tmp_path / "checkpoint"
    send([placed(501)])
    run_stream(checkpoint=checkpoint)
    send([placed(502), placed(503), placed(504)])
    name = topic_name(Topic.ORDERS)
    cons = consumer()
    try:
        ends = end_offsets(cons, name)
    finally:
        cons.close()
    cut = [TopicPartition(name, p, end) for p, end in ends.items() if end]
    client = admin()  # kept: its futures are answered by its own threads
    for future in client.delete_records(cut).values():
        future.result(10)
    settings = dataclasses.replace(Settings(), checkpoint_dir=str(checkpoint))
    lines = retention_losses(settings)
    assert len(lines) >= 1 and all(f"records of {name}[" in line for line in lines), lines
    assert sum(int(line.split()[2]) for line in lines) == 3  # 502-504, never read
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException, match="not available in Kafka any more"):
        run_stream(checkpoint=checkpoint, fail_on_data_loss=True)
    run_stream(checkpoint=checkpoint, fail_on_data_loss=False)
    assert set(latest(outputs(Topic.ORDERS_ENRICHED))) == {501}
    send([placed(505)])
    run_stream(checkpoint=checkpoint, fail_on_data_loss=False)
    assert set(latest(outputs(Topic.ORDERS_ENRICHED))) == {501, 505}

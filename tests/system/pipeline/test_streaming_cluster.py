"""The job on a real Spark standalone cluster: a Master and a Worker as separate processes.

Both start with the command lines of ``docker-compose.yml``'s ``spark-master`` and
``spark-worker`` services (host, ports and work directory mapped to this machine),
the job runs with ``SPARK_MASTER=spark://…`` over Apache Kafka, and its
executor JVM is killed with SIGKILL mid-run. What reaches the enriched topics must
equal what the same event script gives in local mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from contract.events import OrderStatus, Topic
from runtime.conf import BASE_DIR
from tests.conftest import free_port
from tests.integration.streaming.test_streaming_enrich import (
    T0,
    full_lifecycle,
    placed,
    point,
    run_batch,
    status,
)
from tests.integration.streaming.test_streaming_job import latest, outputs, send
from tests.waiting import wait_until

pytestmark = pytest.mark.spark


def compose_command(service: str, mapping: dict[str, str]) -> list[str]:
    """The service's command from docker-compose.yml, with words replaced by ``mapping``."""
    compose = yaml.safe_load((BASE_DIR / "docker-compose.yml").read_text())
    command = compose["services"][service]["command"]
    out = []
    for word in command:
        word = str(word)
        for old, new in mapping.items():
            word = word.replace(old, new)
        out.append(word)
    return out


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def executor_pids(worker_port: int) -> list[int]:
    """PIDs of executor JVMs launched by our Worker (found by its URL on their command line)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "CoarseGrainedExecutorBackend" in cmdline and f":{worker_port}" in cmdline:
            pids.append(int(proc.name))
    return pids


@pytest.fixture
def spark_cluster(tmp_path):
    """A standalone Master and Worker started by the compose file's own command lines."""
    master_port, master_ui, worker_port, worker_ui = (free_port() for _ in range(4))
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1"}
    env["PYTHONPATH"] = str(BASE_DIR)
    env["PYSPARK_PYTHON"] = sys.executable
    mapping = {
        "spark-master": "127.0.0.1",
        "7077": str(master_port),
        "8080": str(master_ui),
        "8081": str(worker_ui),
        "/var/lib/ordertrack/spark-work": str(tmp_path / "work"),
        "${SPARK_WORKER_CORES:-2}": "2",
        "${SPARK_WORKER_MEMORY:-2g}": "1g",
    }
    spark_class = str(spark_home() / "bin" / "spark-class")
    master_cmd = compose_command("spark-master", mapping)
    worker_cmd = compose_command("spark-worker", mapping)
    assert master_cmd[0] == worker_cmd[0] == "spark-class"
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = []
    master = subprocess.Popen(
        [spark_class, *master_cmd[1:]],
        env=env,
        stdout=(logs / "master.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    procs.append(master)
    url = f"spark://127.0.0.1:{master_port}"

    def alive() -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as r:
                state = json.load(r)
        except OSError:
            return False
        return state["status"] == "ALIVE" and (len(procs) == 1 or bool(state["aliveworkers"]))

    try:
        wait_until(alive, 60, "the Spark Master")
        worker = subprocess.Popen(
            [spark_class, *worker_cmd[1:], "--port", str(worker_port)],
            env=env,
            stdout=(logs / "worker.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(worker)
        wait_until(alive, 60, "the Spark Worker to register")
        yield {"url": url, "worker_port": worker_port, "logs": logs}
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def script() -> tuple[list, list, list]:
    """Two halves of an event script with out-of-order, duplicate and malformed events."""
    first = full_lifecycle(order_id=501)[:6] + [placed(502), placed(503)]
    first += [status(OrderStatus.BEING_COOKED, T0 + 30_000, 502)]
    first += [status(OrderStatus.ORDER_CONFIRMED, T0 + 10_000, 502)]  # late
    second = full_lifecycle(order_id=501)[6:] + [first[1]]  # the rest, plus a duplicate
    second += [status(OrderStatus.CANCELLED, T0 + 5_000, 503)]
    second += [point(T0 + 50_000, 0.2, order_id=504), placed(504)]  # point before its order
    raw = [
        (Topic.ORDERS, b"{not json"),
        (Topic.DELIVERY_LOCATIONS, json.dumps({"schema_version": 1, "order_id": 9}).encode()),
    ]
    return first, second, raw


def test_cluster_run_with_a_killed_executor_equals_local_mode(spark, kafka_topics, spark_cluster):
    first, second, raw = script()
    env = {
        **os.environ,
        "PYTHONPATH": str(BASE_DIR),
        "SPARK_MASTER": spark_cluster["url"],
        "SPARK_LOCAL_IP": "127.0.0.1",
        "STREAMING_CHECKPOINT_DIR": str(spark_cluster["logs"].parent / "checkpoint"),
        "STREAMING_TRIGGER_MS": "500",
    }
    send(first, raw=raw[:1])
    job = subprocess.Popen(
        [sys.executable, "-m", "streaming"],
        cwd=BASE_DIR,
        env=env,
        # Its stdout too: Spark writes a line there per batch slower than the trigger, and
        # a pipe nobody reads blocks the job once full (docs/operations.md, 5.2).
        stdout=(spark_cluster["logs"] / "job.log").open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until(lambda: len(latest(outputs(Topic.ORDERS_ENRICHED))) == 3, 180, "first outputs")
        (executor,) = wait_until(
            lambda: executor_pids(spark_cluster["worker_port"]), 30, "the executor JVM"
        )
        os.kill(executor, signal.SIGKILL)
        send(second, raw=raw[1:])
        wait_until(
            lambda: executor_pids(spark_cluster["worker_port"]) not in ([], [executor]),
            120,
            "the Worker to launch a new executor",
        )
        want = run_batch(spark, first + second, raw=[(t, b"1", v) for t, v in raw])
        want_latest = latest(want[Topic.ORDERS_ENRICHED])
        want_lines = {(r["order_id"], r["line"]) for r in want[Topic.ORDER_ITEMS_ENRICHED]}
        want_dead = {(d["source_topic"], d["reason"]) for d in want[Topic.DEAD_LETTERS]}

        def caught_up():
            # Every output topic: one micro-batch writes them from several tasks, so
            # the enriched topic can be complete while an item line is still on its way.
            got = latest(outputs(Topic.ORDERS_ENRICHED))
            lines = {(r["order_id"], r["line"]) for r in outputs(Topic.ORDER_ITEMS_ENRICHED)}
            dead = {(d["source_topic"], d["reason"]) for d in outputs(Topic.DEAD_LETTERS)}
            versions = {k: v["version"] for k, v in got.items()}
            return (lines, dead, versions) == (
                want_lines,
                want_dead,
                {k: v["version"] for k, v in want_latest.items()},
            )

        wait_until(caught_up, 180, "the job to catch up after the executor was killed")
        assert job.poll() is None, "the driver survived the executor's death"
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)

    assert latest(outputs(Topic.ORDERS_ENRICHED)) == want_latest
    assert latest(want[Topic.ORDERS_ENRICHED])[501]["status"] == "DELIVERED"
    assert want_latest[503]["status"] == "CANCELLED" and want_latest[504]["version"] == 2
    items = {(r["order_id"], r["line"]): r for r in outputs(Topic.ORDER_ITEMS_ENRICHED)}
    assert items == {(r["order_id"], r["line"]): r for r in want[Topic.ORDER_ITEMS_ENRICHED]}
    dead = {(d["source_topic"], d["reason"]) for d in outputs(Topic.DEAD_LETTERS)}
    assert dead == want_dead
    assert len(dead) == 2

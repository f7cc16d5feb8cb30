"""``make run`` from its command to the first order readable through REST, on a fresh
``var/`` and again over the data the first run left (issue 52's target: <= 90 s with a
warm Maven cache; issue 51's: the first enriched record within 60 s).

Times, from the spawn of ``python -m localrun``: each component's ready line and
"Ordertrack is ready", the first ``orders_enriched`` record, the first REST detail with
Pinot's tracking; then SIGTERM until every process is gone. ``--runs 2`` runs the second
over the first one's data.

    .venv/bin/python -m bench startup --runs 2
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench import harness
from localrun.launch import free_addresses

#: The supervisor's line for each component: "   3.7s kafka     | ready in 3.7 s".
READY = re.compile(r"^\s*[\d.]+s ([\w-]+)\s*\| ready in ")


def one_run(var: Path, ports: dict[str, str], timeout: float) -> dict:
    """One ``make run`` over ``var`` on ``ports`` (chosen once: a later run over the same
    data must listen where the first did, as Pinot's server is registered in ZooKeeper by
    host and port): the times (s from spawn) of each milestone."""
    web = int(ports["WEB_PORT"])
    env = {
        **os.environ,
        "DJANGO_DEBUG": "true",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "KAFKA_TOPIC_PREFIX": "",
        "KAFKA_EMBEDDED": "true",
        **ports,
    }
    for key in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(key, None)
    marks: dict[str, float] = {}
    lines: list[str] = []
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "localrun"],
        cwd=harness.ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.rstrip())
            at = time.monotonic() - started
            if "Ordertrack is ready" in line:
                marks.setdefault("system ready", at)
            elif (m := READY.search(line)) is not None:
                marks.setdefault(f"{m.group(1)} ready", at)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    base = f"http://127.0.0.1:{web}"
    client = httpx.Client(base_url=base, timeout=5)
    token = None
    spawned = time.time() - (time.monotonic() - started)  # the spawn, in epoch seconds
    first = None
    try:
        while time.monotonic() - started < timeout and "first order via REST" not in marks:
            if proc.poll() is not None:
                break
            time.sleep(0.25)
            if first is None and "kafka ready" in marks:
                first = FirstRecord(env["KAFKA_BOOTSTRAP_SERVERS"], "orders_enriched")
            if first is not None and first.poll() is not None:
                marks.setdefault("first enriched record", first.at - spawned)
            if "system ready" not in marks:
                continue
            # Two reads a tick at most (the list comes from Pinot, so its first order's
            # detail does too): 480 a minute, inside the operator's API_THROTTLE_READS_STAFF.
            try:
                if token is None:
                    answer = client.post(
                        "/api/v1/auth/token/",
                        json={"username": "operator", "password": "ordertrack-demo"},
                    )
                    token = answer.raise_for_status().json()["token"]
                    client.headers["Authorization"] = f"Token {token}"
                orders = client.get("/api/v1/orders/?limit=5").json().get("results", [])
                for order in orders:
                    body = client.get(f"/api/v1/orders/{order['id']}/")
                    tracking = body.json().get("tracking") if body.status_code == 200 else None
                    if tracking and tracking.get("source") == "pinot":
                        marks.setdefault("first order via REST", time.monotonic() - started)
                        break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
    finally:
        stop = time.monotonic()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        marks["stop (SIGTERM to exit)"] = time.monotonic() - stop
        client.close()
        if first is not None:
            first.close()
    with (var / "bench-console.log").open("a") as out:
        out.write("\n".join(lines) + "\n")
    return {"marks": marks, "exit_code": proc.returncode}


class FirstRecord:
    """Watches a topic from its start; ``at`` is the broker time (epoch s) of its first record."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench-startup",
             "enable.auto.commit": False, "auto.offset.reset": "earliest",
             "topic.metadata.refresh.interval.ms": 1000}
        )  # fmt: skip
        self.consumer.subscribe([topic])
        self.at: float | None = None

    def poll(self) -> float | None:
        if self.at is None:
            message = self.consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.at = message.timestamp()[1] / 1000
        return self.at

    def close(self) -> None:
        self.consumer.close()


OPTIONS = {"--runs": 2, "--timeout": 240.0}


def run(args: argparse.Namespace) -> dict:
    var = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    ports = free_addresses(var)
    runs = []
    for index in range(args.runs):
        runs.append({"over": "fresh var" if index == 0 else "the previous run's data",
                     **one_run(var, ports, args.timeout)})  # fmt: skip
    names = sorted({name for run in runs for name in run["marks"]},
                   key=lambda n: max(r["marks"].get(n, 0) for r in runs))  # fmt: skip
    harness.print_table(
        "make run: seconds from the command to each milestone",
        [(name, *(f"{r['marks'][name]:.1f}" if name in r["marks"] else "-" for r in runs))
         for name in names],
        header=("milestone", *(r["over"] for r in runs)),
    )  # fmt: skip
    print(f"  consoles in {var}/bench-console.log (last run)")
    return {"runs": runs, "var": str(var)}

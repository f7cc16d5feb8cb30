"""Crash and restart, with real processes: kill -9 the Spark job, the relay, Apache
Pinot (all three of its JVMs) and Apache Kafka while the simulator runs the business, and
prove that every order's final state and full timeline in Pinot equal the system of
record, with no duplicate in the append-only items table.

The components run exactly as ``make run`` starts them (the one launcher,
:class:`localrun.launch.System`), on their own SQLite file and free ports. The supervisor
notices each death, reports it and restarts the component: the stream job resumes from
its checkpoint, and Kafka from its log on disk (nothing acknowledged with acks=all is
lost), while the relay and the simulator's GPS producer retry what it did not
acknowledge.
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contract.events import STATUS_TIME_FIELDS, OrderStatus, status_time_field
from localrun.launch import LaunchError, System
from tests.waiting import wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]
MANAGE = [sys.executable, str(ROOT / "manage.py")]


def _database_truth(db: Path) -> tuple[dict[int, dict], int]:
    """Per order: status and the time it entered each status; and the item row count."""
    with sqlite3.connect(db) as conn:
        orders = {
            row[0]: {"status": row[1], "times": {}}
            for row in conn.execute("SELECT id, status FROM orders_order")
        }
        for order_id, status, changed_at in conn.execute(
            "SELECT order_id, status, changed_at FROM orders_orderstatuschange ORDER BY id"
        ):
            moment = datetime.fromisoformat(changed_at).replace(tzinfo=UTC)  # Django stores UTC
            orders[order_id]["times"][status] = int(moment.timestamp() * 1000)
        items = conn.execute("SELECT COUNT(*) FROM orders_orderitem").fetchone()[0]
    return orders, items


def _pinot_state(query) -> dict[int, dict]:
    columns = ", ".join(STATUS_TIME_FIELDS)
    rows = query(f"SELECT order_id, status, {columns} FROM orders_enriched LIMIT 100000")
    out = {}
    for row in rows:
        times = {}
        for status in OrderStatus:
            value = row[status_time_field(status)]
            if value:  # Pinot's default null value for a LONG time column is 0
                times[status.value] = int(value)
        out[int(row["order_id"])] = {"status": row["status"], "times": times}
    return out


def _kill_group(child) -> None:
    """kill -9 a component and everything it started (Kafka's or Spark's JVM)."""
    os.killpg(child.process.pid, signal.SIGKILL)


def _wait_restarted(child, old_pid: int, timeout: float = 240.0) -> None:
    def restarted() -> bool:
        proc = child.process
        return proc is not None and proc.pid != old_pid and child.ready.is_set()

    wait_until(restarted, timeout, f"{child.component.name} restarted and ready", interval=0.2)


def test_kill_minus_nine_every_component_and_lose_nothing(tmp_path, monkeypatch):
    wanted = ("kafka", "relay", "pinot", "streaming")
    env = {"KAFKA_TOPIC_PREFIX": "", "KAFKA_EMBEDDED": "true", "LOG_LEVEL": "WARNING"}
    monkeypatch.delenv("DATABASE_URL", raising=False)
    log = io.StringIO()
    system = System(wanted, workdir=tmp_path, env=env, out=log, max_restarts=3)
    for key, value in system.env.items():  # the commands below and the reads: this run's
        monkeypatch.setenv(key, value)
    db = tmp_path / "ordertrack.sqlite3"
    subprocess.run([*MANAGE, "migrate", "-v0"], cwd=ROOT, check=True)
    subprocess.run(
        [*MANAGE, "simulate", "--seed-only", "--seed", "4"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    # The business runs on virtual time while components die under it.
    load = subprocess.Popen(
        [*MANAGE, "simulate", "--fast", "--duration", "1200", "--rate", "12", "--pace", "30", "--seed", "9"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        try:
            system.start()
        except LaunchError:
            pytest.fail(log.getvalue()[-3000:])
        for name in ("streaming", "relay", "pinot", "kafka"):
            time.sleep(3)
            child = system.child(name)
            old_pid = child.process.pid
            _kill_group(child)
            _wait_restarted(child, old_pid)
        assert load.wait(300) == 0
        # After the last restart (the broker), the system must converge.
        from tracker.tracking.selectors import query

        truth, item_rows = _database_truth(db)
        assert len(truth) > 50
        deadline = time.monotonic() + 180
        while True:
            pinot = _pinot_state(query)
            if pinot == truth or time.monotonic() > deadline:
                break
            time.sleep(2)
        missing = sorted(set(truth) - set(pinot))
        wrong = sorted(o for o in truth if o in pinot and pinot[o] != truth[o])
        assert (missing, wrong) == ([], []), (
            missing[:5],
            [(o, truth[o], pinot[o]) for o in wrong[:3]],
        )
        lines = query("SELECT order_id, line, COUNT(*) AS n FROM order_items_enriched "
                      "GROUP BY order_id, line HAVING COUNT(*) > 1 LIMIT 10 OPTION(skipUpsert=true)")  # fmt: skip
        assert lines == []
        assert query("SELECT COUNT(*) AS n FROM order_items_enriched")[0]["n"] == item_rows
        for name in wanted:
            assert f"!! {name} exited with code" in log.getvalue()  # each death was reported
    finally:
        if load.poll() is None:
            load.kill()
        system.stop()

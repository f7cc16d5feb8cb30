"""A restart of ``make run``'s Pinot over its data folder after Kafka's byte cap deleted
where its consuming segments start (docs/pinot.md, "Graceful stop").

``python -m localrun.pinot`` runs here as the supervisor runs it: on free ports (the same
ones at each restart, where its ZooKeeper knows its instances), over a data folder of its
own, consuming topics of its own on the run's Kafka. Records of distinct orders reach
Pinot; the Pinot process stops; Kafka's retention is done by hand (DeleteRecords up to the
end offsets moves the log's start exactly as the byte cap does, without waiting for it);
Pinot starts again over the same folder:

* stopped gracefully (SIGTERM, as the supervisor stops it), it committed its consuming
  segments first, and every order is still there;
* killed instead (kill -9 of the launcher and its JVMs: a crash), it committed nothing,
  and its consuming segments are rebuilt from the first offset Kafka still has: no row
  may be lost then either. Today they are (docs/pinot.md, "What it does not cover"), so
  that test is an expected failure, strict, until retention outlives Pinot's commit
  (issue 70); it fails as expected only on the lost rows (:class:`RowsLost`).

The parts that need no engine (which segments consume, the rows each holds, the stop
budgets of ``make run`` and ``make run-prod``) are checked without them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.events import topic_name
from localrun.pinot import COMMIT_TIMEOUT, STOP_TIMEOUT
from localrun.pinot.commit import CommitError, consuming_segments, count_sql, rows_per_segment
from localrun.pinot.conf import free_ports_env
from pinot.definitions import load_tables
from tests.fixtures_pinot import PinotHarness, delivery_event, item_event, order_event
from tests.waiting import wait_until
from tracker.tracking import selectors as s
from tracker.tracking.exceptions import TrackingUnavailable

ROOT = Path(__file__).resolve().parents[3]
#: Orders per test: enough that each of a topic's partitions gets some.
ORDERS = 30
TABLES = sorted(load_tables())


# ------------------------------------------------------------------ without the engines


def test_the_consuming_segments_are_those_a_server_is_to_consume():
    ideal = {
        "orders_enriched__0__4__20261128T1200Z": {"Server_127.0.0.1_8098": "ONLINE"},
        "orders_enriched__0__5__20261128T1800Z": {"Server_127.0.0.1_8098": "CONSUMING"},
        "orders_enriched__1__5__20261128T1800Z": {"Server_a": "CONSUMING", "Server_b": "OFFLINE"},
        "orders_enriched__2__3__20261128T1700Z": {"Server_127.0.0.1_8098": "OFFLINE"},
    }
    assert consuming_segments(ideal) == [
        "orders_enriched__0__5__20261128T1800Z",
        "orders_enriched__1__5__20261128T1800Z",
    ]
    assert consuming_segments(None) == consuming_segments({}) == []


def test_each_consuming_segments_rows_are_counted_only_from_a_complete_answer():
    """A segment without a row has no group; an answer with an exception, or from fewer
    servers than were asked, says nothing of the segments not counted: no commit on it."""
    sql = count_sql("order_items_enriched", ["b__1", "a'x"])
    assert sql == (
        "SELECT $segmentName, COUNT(*) FROM order_items_enriched "
        "WHERE $segmentName IN ('a''x', 'b__1') GROUP BY $segmentName LIMIT 2 "
        "OPTION(skipUpsert=true)"
    )
    answer = {
        "resultTable": {
            "dataSchema": {"columnNames": ["$segmentName", "count(*)"]},
            "rows": [["b__1", 12]],
        },
        "exceptions": [],
        "numServersQueried": 1,
        "numServersResponded": 1,
    }
    assert rows_per_segment(answer) == {"b__1": 12}
    for broken in (
        {"exceptions": [{"errorCode": 250, "message": "ServerTimeoutError"}]},
        {"numServersResponded": 0},
        {"numServersQueried": 0, "numServersResponded": 0},
    ):
        with pytest.raises(CommitError):
            rows_per_segment({**answer, **broken})


def test_pinot_stops_before_kafka_with_time_to_commit_in_make_run_and_run_prod(tmp_path):
    """The supervisor stops the last stage first and gives each component its own budget;
    ``make run-prod`` stops the application's supervisor before the infrastructure's."""
    from localrun import compose as prod
    from localrun.components import components
    from tests.integration.config.test_cluster_topology import COMPOSE_VARS

    assert STOP_TIMEOUT >= COMMIT_TIMEOUT + 30  # then three JVMs stop, about 5 s each
    run = {c.name: c for c in components()}
    assert run["pinot"].stage > run["kafka"].stage
    assert run["pinot"].stop_timeout == STOP_TIMEOUT
    infra, app = prod.components(prod.plan(var=tmp_path / "prod", overrides=COMPOSE_VARS))
    assert "kafka" in {c.name for c in infra}
    (pinot,) = [c for c in app if c.name == "pinot-broker"]
    assert pinot.stop_timeout == STOP_TIMEOUT


# ------------------------------------------------------------------ on the engines


class PinotProcess:
    """``python -m localrun.pinot`` over one data folder, started again on the same ports."""

    def __init__(self, env: dict[str, str], prefix: str) -> None:
        self.env = env
        self.prefix = prefix
        self.broker_url = env["PINOT_BROKER_URL"]
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def output(self) -> str:
        return "".join(self.lines)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, attempts: int = 1, timeout: float = 240.0) -> None:
        """Start it and wait until it is ready; up to ``attempts`` times, as the supervisor
        starts a component again that exited during its start (after a kill -9, Helix may
        still see the dead instances' ZooKeeper sessions)."""
        for attempt in range(1, attempts + 1):
            self.lines = lines = []
            self.proc = proc = subprocess.Popen(
                [sys.executable, "-m", "localrun.pinot"],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its JVMs share its process group, as under make run
            )
            threading.Thread(target=self._read, args=(proc, lines), daemon=True).start()
            wait_until(
                lambda proc=proc: "pinot: ready" in self.output() or proc.poll() is not None,
                timeout,
                "python -m localrun.pinot to print 'pinot: ready'",
            )
            if proc.poll() is None or attempt == attempts:
                break
            proc.wait()
        assert self.running(), self.output()[-4000:]

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: list[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    def stop(self) -> int:
        """SIGTERM to the launcher alone, as the supervisor stops it; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_TIMEOUT)

    def kill(self) -> None:
        """kill -9 of the launcher and its JVMs: what a crash leaves."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def use(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Publish to its topics and read through its broker (the product's selectors)."""
        monkeypatch.setenv("KAFKA_TOPIC_PREFIX", self.prefix)
        monkeypatch.setenv("PINOT_BROKER_URL", self.broker_url)


@pytest.fixture(scope="module")
def own_pinot(kafka_broker, tmp_path_factory) -> Iterator[PinotProcess]:
    """A Pinot of this module's own (its data folder and topics), started once."""
    from runtime.conf import KafkaConfig
    from runtime.kafka import ensure_topics
    from tests.engines import delete_topics_with_prefix

    prefix = f"t{uuid.uuid4().hex[:10]}."
    created = ensure_topics(config=KafkaConfig(topic_prefix=prefix))
    env = {
        **os.environ,
        **free_ports_env(),
        "ORDERTRACK_VAR_DIR": str(tmp_path_factory.mktemp("pinot-restart")),
        "KAFKA_TOPIC_PREFIX": prefix,
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("PINOT_EXTRA_SERVER_PORTS", "PINOT_REPLICATION"):  # one server, as make run
        env.pop(name, None)
    pinot = PinotProcess(env, prefix)
    try:
        pinot.start()
        yield pinot
    finally:
        if pinot.proc is not None:
            if pinot.running():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    pinot.stop()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pinot.proc.pid, signal.SIGKILL)  # whatever of it is left
            pinot.proc.wait()
        delete_topics_with_prefix(prefix, also=created)


def _records(ids: list[int]) -> list:
    """Each order's record in each table: its state, a courier position, an item."""
    return [
        record
        for n, order in enumerate(ids)
        for record in (
            order_event(order, 1),
            delivery_event(order, 1, 52.5 + n / 1000, 13.4),
            item_event(order, 1, "Margherita", 2, 8.5),
        )
    ]


def _topics(prefix: str) -> list[str]:
    return sorted(topic_name(table.topic, prefix) for table in load_tables().values())


def _end_offsets(prefix: str) -> dict[str, dict[int, int]]:
    from runtime.kafka import consumer, end_offsets

    cons = consumer()
    try:
        return {name: end_offsets(cons, name) for name in _topics(prefix)}
    finally:
        cons.close()


def _retention_deletes_everything(prefix: str) -> None:
    """Kafka's retention, at once: every record of the topics before their end offsets
    is deleted (the log's start moves to its end), as the byte cap would."""
    from confluent_kafka import TopicPartition

    from runtime.kafka import admin, consumer, start_offsets

    ends = _end_offsets(prefix)
    cut = [TopicPartition(name, p, end) for name, of in ends.items() for p, end in of.items()]
    client = admin()  # kept: its futures are answered by its own threads
    for future in client.delete_records([c for c in cut if c.offset]).values():
        future.result(15)
    cons = consumer()
    try:
        assert {name: start_offsets(cons, name) for name in ends} == ends
    finally:
        cons.close()


def test_a_graceful_stop_commits_consuming_segments_so_a_restart_after_retention_loses_no_row(
    own_pinot, id_base, monkeypatch
):
    if not own_pinot.running():  # an earlier test of the module left it stopped
        own_pinot.start()
    own_pinot.use(monkeypatch)
    ids = [id_base + n for n in range(1, ORDERS + 1)]
    harness = PinotHarness(id_base)
    harness.publish(*_records(ids))
    harness.sync(timeout=60)
    # Every partition got some, so every consuming segment holds a row and is committed.
    ends = _end_offsets(own_pinot.prefix)
    assert all(end > 0 for of in ends.values() for end in of.values()), ends

    assert own_pinot.stop() == 0, own_pinot.output()[-4000:]
    said = own_pinot.output()
    for table in TABLES:
        assert f"pinot: {table}: committed " in said, said[-4000:]
    assert "not committed" not in said, said[-4000:]

    _retention_deletes_everything(own_pinot.prefix)
    own_pinot.start()
    harness.sync(timeout=60)  # every record of every table, from the committed segments
    states = wait_until(
        lambda: s.order_states(ids), 30, "the orders' states", ignoring=TrackingUnavailable
    )
    assert sorted(states) == ids
    # The new consuming segments start where the committed ones ended: consumption goes on.
    harness.publish(order_event(ids[0], 2, "ORDER_CONFIRMED"))
    harness.sync(timeout=60)
    assert s.order_state(ids[0]).status == "ORDER_CONFIRMED"


class RowsLost(AssertionError):
    """Rows Pinot held before a crash and lacks after its restart: the one failure the
    crash test expects until issue 70 (any other failure is a real one)."""


def _rows(table: str, ids: list[int]) -> int:
    sql = (
        f"SELECT COUNT(*) AS n FROM {table} WHERE order_id IN ({', '.join(map(str, ids))}) "
        "OPTION(skipUpsert=true)"
    )
    return s.query(sql)[0]["n"]


@pytest.mark.xfail(
    strict=True,
    raises=RowsLost,
    reason="docs/pinot.md: a crash commits nothing, so after Kafka's retention the rows only "
    "consuming segments held are gone, and the restarted consumers sit on the deleted offsets; "
    "until issue 70 (retention that outlives Pinot's commit)",
)
def test_a_crash_after_retention_loses_no_row(own_pinot, id_base, monkeypatch):
    """What the graceful stop gives, after a crash: nothing was committed, and the
    restarted server resumes at the first offset Kafka still has; every row published
    before the crash, and every row published after the restart, must be there."""
    if not own_pinot.running():
        own_pinot.start()
    own_pinot.use(monkeypatch)
    ids = [id_base + n for n in range(1, ORDERS + 1)]
    harness = PinotHarness(id_base)
    harness.publish(*_records(ids))
    harness.sync(timeout=60)
    before = {table: _rows(table, ids) for table in TABLES}
    assert all(before.values()), before

    own_pinot.kill()
    _retention_deletes_everything(own_pinot.prefix)
    # As often as the supervisor would start it again (max_restarts): the server's
    # readiness waits for its consuming segments to catch up, and they sit on their
    # deleted start offsets, so a start can run out of its budget.
    own_pinot.start(attempts=5)
    later = [id_base + 1000 + n for n in range(1, ORDERS + 1)]
    PinotHarness(id_base).publish(*_records(later))

    whole = {table: 2 * rows for table, rows in before.items()}  # the same records again

    # Once every row published after the restart is there, each partition's consumer has
    # gone past the offsets the crash's rows had (Kafka deleted them, nothing committed
    # them): no more of them can come, so what is held then is the answer. Consumers
    # that never get there lose the later rows too, which the count below shows.
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: {table: _rows(table, later) for table in TABLES} == before,
            120,
            "every row published after the restart",
            ignoring=TrackingUnavailable,
        )
    held = {table: _rows(table, ids + later) for table in TABLES}
    if held != whole:
        raise RowsLost(
            f"rows per table before the crash: {before}; of those and as many published "
            f"after the restart ({whole}), Pinot holds {held}"
        )

"""The real engines of a test run, started once for the whole ``make test``.

``python -m tests.engines -- COMMAND...`` starts Apache Kafka and Apache Pinot on free
loopback ports (through the one launcher, :class:`localrun.launch.System`, as ``make run``
starts them), runs COMMAND with ``KAFKA_TEST_BROKER`` and ``PINOT_TEST_*`` naming them
(both of ``make test``'s pytest passes), then stops them. A pytest session started
without it (``pytest tests/x.py``) starts its own (:func:`session_kafka`,
:func:`session_pinot`).

Pinot's realtime tables cannot be made per test (each costs seconds and ZooKeeper
writes) nor truncated, so one set serves the run: they consume the topics of one prefix
(``PINOT_TEST_TOPIC_PREFIX``) and every test publishes there with ids of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.conf import var_dir

if TYPE_CHECKING:
    from localrun.launch import System

#: Set by ``python -m tests.engines``: the bootstrap address of the run's broker.
TEST_BROKER = "KAFKA_TEST_BROKER"


def start_kafka(  # noqa: ANN201 - a KafkaBroker
    data_dir: Path, port: int | None = None, log_name: str = "test-kafka.log"
):
    """A Kafka node (on a free port unless ``port``), its log in ``var/logs/<log_name>``."""
    from localrun.kafka import KafkaBroker

    return KafkaBroker.fresh(data_dir, log_path=var_dir() / "logs" / log_name, port=port)


@contextlib.contextmanager
def session_kafka(data_dir: Path) -> Iterator[str]:
    """The test session's broker: the run's (``KAFKA_TEST_BROKER``) or a new one, with
    ``KAFKA_BOOTSTRAP_SERVERS`` pointing at it for the session; yields its address."""
    shared = os.environ.get(TEST_BROKER, "")
    if shared:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = shared
        yield shared
        return
    with engines(data_dir, ["kafka"], f"session_{uuid.uuid4().hex[:8]}_") as system:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = system.kafka
        yield system.kafka


#: Set by ``python -m tests.engines``: the run's Pinot and the topics its tables consume.
PINOT_CONTROLLER = "PINOT_TEST_CONTROLLER_URL"
PINOT_BROKER = "PINOT_TEST_BROKER_URL"
PINOT_TOPIC_PREFIX = "PINOT_TEST_TOPIC_PREFIX"
PINOT_SERVER_PIDFILE = "PINOT_TEST_SERVER_PIDFILE"
#: The Pinot topics' retention: above the tables' flush time (pinot/loader.py checks).
PINOT_TOPIC_RETENTION_MS = 3 * 24 * 3600 * 1000
#: The tables' retention in days (as make run's).
PINOT_TABLE_RETENTION_DAYS = 3


@dataclass(frozen=True)
class TestPinot:
    """The run's Pinot as the tests see it, whichever process started it."""

    controller_url: str
    broker_url: str
    kafka_bootstrap: str
    topic_prefix: str
    server_pidfile: Path

    @property
    def settings(self):  # noqa: ANN201 - a pinot.loader.Settings
        """The loader's settings for these tables (tests that load tables of their own)."""
        from pinot import loader

        return loader.Settings(
            controller_url=self.controller_url,
            kafka_bootstrap=self.kafka_bootstrap,
            topic_prefix=self.topic_prefix,
            kafka_retention_ms=PINOT_TOPIC_RETENTION_MS,
            retention_days=PINOT_TABLE_RETENTION_DAYS,
        )

    def server_pid(self) -> int:
        """The running server's pid (rewritten by its keeper at each restart)."""
        return int(self.server_pidfile.read_text())

    def env(self) -> dict[str, str]:
        return {
            PINOT_CONTROLLER: self.controller_url,
            PINOT_BROKER: self.broker_url,
            PINOT_TOPIC_PREFIX: self.topic_prefix,
            PINOT_SERVER_PIDFILE: str(self.server_pidfile),
        }


@contextlib.contextmanager
def engines(
    workdir: Path, names: list[str], topic_prefix: str, env: dict[str, str] | None = None
) -> Iterator[System]:
    """The named engines of a test run, started in ``workdir`` on free ports, for the
    block; Kafka's launcher creates the product's topics of ``topic_prefix``, which Pinot's
    tables consume. What they print while starting goes to ``workdir/engines.log`` (their
    own logs: ``workdir/logs/``)."""
    from localrun.launch import System

    workdir.mkdir(parents=True, exist_ok=True)
    variables = {"KAFKA_TOPIC_PREFIX": topic_prefix, **(env or {})}
    with (
        open(workdir / "engines.log", "a", encoding="utf-8") as out,
        System(names, workdir=workdir, env=variables, out=out) as system,
    ):
        yield system


def _test_pinot(system: System) -> TestPinot:
    return TestPinot(
        controller_url=system.pinot_controller_url,
        broker_url=system.pinot_broker_url,
        kafka_bootstrap=system.kafka,
        topic_prefix=system.env["KAFKA_TOPIC_PREFIX"],
        server_pidfile=Path(system.env["ORDERTRACK_VAR_DIR"]) / "pinot" / "server.pid",
    )


@contextlib.contextmanager
def session_pinot(data_dir: Path, bootstrap: str) -> Iterator[TestPinot]:
    """The test session's Pinot: the run's (``PINOT_TEST_*``) or a new one on ``bootstrap``."""
    if os.environ.get(PINOT_BROKER):
        yield TestPinot(
            controller_url=os.environ[PINOT_CONTROLLER],
            broker_url=os.environ[PINOT_BROKER],
            kafka_bootstrap=bootstrap,
            topic_prefix=os.environ[PINOT_TOPIC_PREFIX],
            server_pidfile=Path(os.environ[PINOT_SERVER_PIDFILE]),
        )
        return
    from runtime.conf import KafkaConfig
    from runtime.kafka import ensure_topics

    prefix = f"pinot_{uuid.uuid4().hex[:8]}_"
    config = KafkaConfig(bootstrap_servers=bootstrap, embedded=False, topic_prefix=prefix,
                         retention_ms=PINOT_TOPIC_RETENTION_MS)  # fmt: skip
    ensure_topics(config=config)
    with engines(data_dir, ["pinot"], prefix, {"KAFKA_BOOTSTRAP_SERVERS": bootstrap}) as system:
        yield _test_pinot(system)


def delete_topics_with_prefix(prefix: str, also: Iterable[str] = ()) -> None:
    """Delete a test's topics (best effort: a test that stopped the broker has none left)."""
    from runtime.kafka import admin

    try:
        client = admin(socket_timeout_ms=5000)
        names = {t for t in client.list_topics(timeout=5).topics if t.startswith(prefix)}
        names.update(also)
        if names:
            for future in client.delete_topics(sorted(names), operation_timeout=10).values():
                with contextlib.suppress(Exception):
                    future.result(15)
    except Exception:  # noqa: BLE001, S110 - the broker may be down on purpose
        pass


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: python -m tests.engines -- COMMAND...", file=sys.stderr)
        return 2
    # Under var/ (wiped first), so the engines' logs outlive the run: var/test-engines/logs.
    workdir = var_dir() / "test-engines"
    shutil.rmtree(workdir, ignore_errors=True)
    with engines(workdir, ["kafka", "pinot"], f"pinot_{uuid.uuid4().hex[:8]}_") as system:
        shared = _test_pinot(system)
        print(f"engines: Apache Kafka on {system.kafka} for this run", flush=True)
        print(f"engines: Apache Pinot on {shared.broker_url} for this run", flush=True)
        env = {**os.environ, TEST_BROKER: system.kafka, **shared.env()}
        return subprocess.call(argv[1:], env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

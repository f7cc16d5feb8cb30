"""The real engines of a test run, started once for the whole ``make test``.

``python -m tests.engines -- COMMAND...`` starts Apache Kafka and Apache Pinot on free
loopback ports, runs COMMAND with ``KAFKA_TEST_BROKER`` and ``PINOT_TEST_*`` naming them
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
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runtime.conf import var_dir

#: Set by ``python -m tests.engines``: the bootstrap address of the run's broker.
TEST_BROKER = "KAFKA_TEST_BROKER"


def start_kafka(  # noqa: ANN201 - a KafkaBroker
    data_dir: Path, port: int | None = None, log_name: str = "test-kafka.log"
):
    """A Kafka node (on a free port unless ``port``), its log in ``var/logs/<log_name>``."""
    from localrun.kafka import KafkaBroker

    return KafkaBroker.fresh(data_dir, log_path=var_dir() / "logs" / log_name, port=port)


@contextlib.contextmanager
def session_kafka(data_dir: Path) -> Iterator[object]:
    """The test session's broker: the run's (``KAFKA_TEST_BROKER``) or a new one, with
    ``KAFKA_BOOTSTRAP_SERVERS`` pointing at it for the session."""
    shared = os.environ.get(TEST_BROKER, "")
    if shared:
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = shared
        yield shared
        return
    broker = start_kafka(data_dir)
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap_servers
    try:
        yield broker
    finally:
        broker.stop()


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


def start_pinot(data_dir: Path, bootstrap: str):  # noqa: ANN201 - an localrun.pinot.LocalPinot
    """Pinot on free ports consuming fresh topics of a new prefix on ``bootstrap``; its
    server restarted whenever it dies (the kill test kills it from another process)."""
    from localrun.kafka import free_port
    from localrun.pinot import LocalPinot
    from localrun.pinot.conf import Ports
    from runtime.conf import KafkaConfig
    from runtime.kafka import ensure_topics

    prefix = f"pinot_{uuid.uuid4().hex[:8]}_"
    ensure_topics(
        config=KafkaConfig(
            bootstrap_servers=bootstrap,
            embedded=False,
            topic_prefix=prefix,
            retention_ms=PINOT_TOPIC_RETENTION_MS,
        )
    )
    pinot = LocalPinot(
        data_dir=data_dir,
        ports=Ports(*(free_port() for _ in range(5))),
        kafka_bootstrap=bootstrap,
        topic_prefix=prefix,
        kafka_retention_ms=PINOT_TOPIC_RETENTION_MS,
        retention_days=PINOT_TABLE_RETENTION_DAYS,
    ).start()
    pinot.keep_server_up()
    return pinot


def _test_pinot(pinot) -> TestPinot:  # noqa: ANN001 - an localrun.pinot.LocalPinot
    return TestPinot(
        controller_url=pinot.controller_url,
        broker_url=pinot.broker_url,
        kafka_bootstrap=pinot.settings.kafka_bootstrap,
        topic_prefix=pinot.settings.topic_prefix,
        server_pidfile=pinot.server_pidfile,
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
    pinot = start_pinot(data_dir, bootstrap)
    try:
        yield _test_pinot(pinot)
    finally:
        pinot.stop()


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
    with tempfile.TemporaryDirectory(prefix="ordertrack-test-engines-") as data:
        broker = start_kafka(Path(data) / "kafka")
        print(f"engines: Apache Kafka on {broker.bootstrap_servers} for this run", flush=True)
        try:
            # Under var/ (wiped first), so its logs outlive the run: var/test-pinot/logs.
            pinot_dir = var_dir() / "test-pinot"
            shutil.rmtree(pinot_dir, ignore_errors=True)
            pinot = start_pinot(pinot_dir, broker.bootstrap_servers)
            try:
                shared = _test_pinot(pinot)
                print(f"engines: Apache Pinot on {shared.broker_url} for this run", flush=True)
                env = {**os.environ, TEST_BROKER: broker.bootstrap_servers, **shared.env()}
                return subprocess.call(argv[1:], env=env)
            finally:
                pinot.stop()
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The real engines of a test run, started once for the whole ``make test``.

``python -m tests.engines -- COMMAND...`` starts Apache Kafka on free loopback ports,
runs COMMAND with ``KAFKA_TEST_BROKER`` naming it (both of ``make test``'s pytest
passes), then stops it. A pytest session started without it (``pytest tests/x.py``)
starts its own broker (:func:`session_kafka`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from contract.conf import var_dir

#: Set by ``python -m tests.engines``: the bootstrap address of the run's broker.
TEST_BROKER = "KAFKA_TEST_BROKER"


def start_kafka(  # noqa: ANN201 - a KafkaBroker
    data_dir: Path, port: int | None = None, log_name: str = "test-kafka.log"
):
    """A Kafka node (on a free port unless ``port``), its log in ``var/logs/<log_name>``."""
    from embedded.kafka import KafkaBroker

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


def delete_topics_with_prefix(prefix: str, also: Iterable[str] = ()) -> None:
    """Delete a test's topics (best effort: a test that stopped the broker has none left)."""
    from contract.kafka import admin

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


def pinot_env() -> dict[str, str]:
    """A whole system's own Apache Pinot on free ports (:func:`embedded.pinot.free_ports_env`)."""
    from embedded.pinot import free_ports_env

    return free_ports_env()


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: python -m tests.engines -- COMMAND...", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ordertrack-test-kafka-") as data:
        broker = start_kafka(Path(data))
        print(f"engines: Apache Kafka on {broker.bootstrap_servers} for this run", flush=True)
        try:
            return subprocess.call(
                argv[1:], env={**os.environ, TEST_BROKER: broker.bootstrap_servers}
            )
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

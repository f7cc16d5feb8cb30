"""A real Apache Pinot (embedded/pinot.py) for the whole test session.

Realtime tables cannot be created per test cheaply (each costs ZooKeeper writes, a
consuming segment per partition and seconds before it answers), nor truncated. So one
set of tables serves the session: they consume the topics of one session-wide prefix
(``SESSION_PREFIX``), and each test publishes there with its own ids
(``PinotHarness.base``) and asserts on those ids only.

Fixtures:

* ``real_pinot`` (session): the running :class:`embedded.pinot.LocalPinot`, on free
  ports, its data in the session's temporary folder, consuming the session broker
  (``kafka_broker``; or ``PINOT_TEST_KAFKA_BOOTSTRAP`` when set, e.g. an Apache Kafka
  started by hand);
* ``real_pinot_harness``: per test, ``KAFKA_TOPIC_PREFIX`` and ``PINOT_BROKER_URL``
  pointed at the session's tables, and a :class:`tests.fixtures_pinot.PinotHarness`
  to publish with and ``sync()`` on.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from contract.conf import KafkaConfig
from contract.kafka import ensure_topics
from embedded.kafka import free_port
from tests.fixtures_pinot import PinotHarness

#: The topics the session's tables consume.
SESSION_PREFIX = f"pinot_{uuid.uuid4().hex[:8]}_"
#: The session topics' retention: above the tables' flush time (pinot/loader.py checks).
SESSION_RETENTION_MS = 3 * 24 * 3600 * 1000


class RealPinotHarness(PinotHarness):
    """``sync()`` for real Pinot: a table whose segments hold no rows yet answers
    ``COUNT(*)`` with no row at all (not 0), which the base harness would not wait on."""

    def sync(self, timeout: float = 30.0) -> None:
        from tracker.tracking.selectors import query

        deadline = time.monotonic() + timeout
        for table, events in self._published.items():
            ids = sorted({e.order_id for e in events})
            expected = len({(e.order_id, getattr(e, "line", e.event_id)) for e in events})
            if table != "order_items_enriched":
                expected = len(events)
            sql = (
                f"SELECT COUNT(*) AS n FROM {table} WHERE order_id IN "
                f"({', '.join(map(str, ids))}) OPTION(skipUpsert=true)"
            )
            while (rows := query(sql)) == [] or rows[0]["n"] < expected:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{table}: Pinot did not ingest {expected} records")
                time.sleep(0.2)


@pytest.fixture(scope="session")
def real_pinot(request, tmp_path_factory) -> Iterator[object]:
    """Pinot for the session: three JVMs, the tables loaded, stopped at the end."""
    from embedded.pinot import LocalPinot, Ports

    bootstrap = os.environ.get("PINOT_TEST_KAFKA_BOOTSTRAP")
    if not bootstrap:
        request.getfixturevalue("kafka_broker")
        bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    ensure_topics(
        config=KafkaConfig(
            bootstrap_servers=bootstrap,
            embedded=False,
            topic_prefix=SESSION_PREFIX,
            retention_ms=SESSION_RETENTION_MS,
        )
    )
    ports = Ports(*(free_port() for _ in range(5)))
    pinot = LocalPinot(
        data_dir=tmp_path_factory.mktemp("pinot"),
        ports=ports,
        kafka_bootstrap=bootstrap,
        topic_prefix=SESSION_PREFIX,
        kafka_retention_ms=SESSION_RETENTION_MS,
        retention_days=3,
    ).start()
    try:
        yield pinot
    finally:
        pinot.stop()


@pytest.fixture
def real_pinot_harness(real_pinot, monkeypatch) -> Iterator[PinotHarness]:
    """Publish to the session's tables' topics and read through its broker, own ids only."""
    bootstrap = real_pinot.settings.kafka_bootstrap
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", SESSION_PREFIX)
    monkeypatch.setenv("PINOT_BROKER_URL", real_pinot.broker_url)
    harness = RealPinotHarness(real_pinot.broker_url)
    try:
        yield harness
    finally:
        harness.producer.flush(5)

"""Shared fixtures: one real embedded broker for the whole session.

Tests isolate themselves with a unique ``KAFKA_TOPIC_PREFIX`` (see
``kafka_topics``) instead of restarting the broker, which keeps the suite fast.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from contract.conf import KafkaConfig
from contract.kafka import ensure_topics
from embedded.broker import EmbeddedBroker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """SQLite tests run on a database file, as ``make run`` does, not Django's default
    in-memory database: that one is shared between threads through SQLite's shared cache,
    where a statement still reading a table makes another connection's write to it fail
    at once ("database table is locked", no busy timeout), which the file's WAL mode and
    busy timeout never do. Tests with threads (relay, notice listener, the served app)
    would fail on that, not on the code under test."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        test = database.setdefault("TEST", {})
        test["NAME"] = str(tmp_path_factory.mktemp("database") / "test.sqlite3")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2 is slow on purpose; tests create many users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    """Every sign-in path is throttled per client (all tests are 127.0.0.1) and per user
    name; each test starts with empty counters so earlier tests cannot spend its budget."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _fresh_read_copies():
    """The read model keeps each order's placed part per process, keyed by id; a test's
    database is rolled back afterwards, so the next test's orders reuse the same ids.
    The notice listener a test started is stopped: it holds a database connection of its
    own, which would keep PostgreSQL from dropping the test database at the end."""
    from tracker.notices import listener
    from tracker.tracking import read_model

    read_model.forget_copies()
    yield
    listener.stop()


@pytest.fixture(scope="session")
def kafka_broker():
    """A real Tansu broker on a free loopback port, shared by the session."""
    port = free_port()
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{port}"
    broker = EmbeddedBroker(KafkaConfig(), log_path=None).start(create_topics=False)
    yield broker
    from tracker.live.bridge import stop_embedded_bridge

    stop_embedded_bridge()  # its consumer would otherwise retry the stopped broker
    broker.stop()


@pytest.fixture
def kafka_topics(kafka_broker, monkeypatch):
    """Fresh, empty topics for one test: a unique prefix on the shared broker."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", prefix)
    ensure_topics(config=KafkaConfig())
    return prefix


# Slow, component-specific fixtures live in their own modules (session-scoped).
pytest_plugins = ["tests.fixtures_spark", "tests.fixtures_pinot", "tests.fixtures_browser"]

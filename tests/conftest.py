"""Shared fixtures: one Apache Kafka node for the whole ``make test``.

Tests isolate themselves with a unique ``KAFKA_TOPIC_PREFIX`` (see
``kafka_topics``, which deletes them afterwards) instead of restarting the broker.
When ``KAFKA_BOOTSTRAP_SERVERS`` names a running broker before the session starts
(``make test`` starts one for both of its pytest passes), the session uses it;
otherwise it starts its own on free ports.

``asgi_lifespan`` runs the web's lifespan around a test that talks to the app (its
sockets, in process or through the browser tests' server), once the test's world is set
up: the app's push bridge then starts as under a server, following the test's topics.

``database_outage`` takes the database server away for real (PostgreSQL only), and
``redis_server`` runs a real Redis to stop and start again, for the tests of what each part
does while it cannot be reached.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from localrun.backends import redis_server_argv, wait_for_redis
from localrun.ports import free_port  # noqa: F401 - the tests' one helper for ports
from runtime.conf import KafkaConfig
from runtime.kafka import ensure_topics


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
def _no_pipeline_monitor_after_the_test():
    """A test that asks for readiness or metrics starts this process's pipeline monitor;
    it stops with that test, as the notice listener does (below): it would sample the
    test's engines after they are gone, and its database connection would keep
    PostgreSQL from dropping the test database at the end."""
    from tracker.operations.pipeline import stop_monitor

    yield
    stop_monitor()


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
def _fresh_read_cache():
    """The read cache holds each order's placed part per process, keyed by id; a test's
    database is rolled back afterwards, so the next test's orders reuse the same ids.
    The notice listener a test started is stopped: it holds a database connection of its
    own, which would keep PostgreSQL from dropping the test database at the end."""
    from tracker.cache import bodies, outage, reads
    from tracker.notices import listener

    reads.clear()
    bodies.clear()
    outage.clear()
    yield
    listener.stop()


class DatabaseOutage:
    """The default database's server gone, as far as this process can tell: its settings
    point at a loopback port nothing listens on, so every new connection is refused for real
    (as when PostgreSQL is stopped in the fault drill). The settings are every thread's; a
    connection is its thread's, so each call closes the calling thread's, and the start
    stops the notice listener, whose thread would read on through the connection it holds
    (it starts again when next asked for, and cannot connect until the end)."""

    def __init__(self) -> None:
        from django.db import connection

        self.connection = connection
        self.saved = dict(connection.settings_dict)

    def start(self) -> None:
        """From the thread that reads next (an async test: its database thread)."""
        from tracker.notices import listener

        self.connection.close()
        self.connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
        listener.stop()

    def end(self) -> None:
        """The server back; from any thread (a timer, for an outage while code runs)."""
        self.connection.settings_dict.update(self.saved)
        self.connection.close()


@pytest.fixture
def no_periodic_recheck(settings):
    """Sockets re-check their access only when a change's signal or a link's end asks
    (the periodic re-check is a day away): a socket closed before a test's deadline was
    closed by what the test did. A test of the periodic re-check sets its own period."""
    settings.PUSH_RECHECK_SECONDS = 86_400.0


@pytest.fixture
def no_push_bridge(settings):
    """No embedded push bridge in this test's web app: nothing the test checks is pushed
    from Kafka (a refusal, a close, a message the test sends to the channel layer itself),
    and a bridge would follow a broker the test does not start."""
    settings.PUSH_BRIDGE_EMBEDDED = False


@pytest.fixture
def database_outage() -> Iterator[DatabaseOutage]:
    """A :class:`DatabaseOutage` to start and end; ended after the test in any case. Skips
    the test on SQLite, which has no server to lose (``make test``'s second run is on
    PostgreSQL)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs a database server to lose: run on PostgreSQL (make test's second run)")
    outage = DatabaseOutage()
    yield outage
    outage.end()


class RedisServer:
    """Debian's redis-server on a free loopback port, stopped (SIGTERM, as the fault drill
    does) and started again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            redis_server_argv(self.port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_redis(self.port)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(20)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def clients(self) -> int:
        """Connections open to the server, other than the one asking."""
        return len(self._ask(lambda admin: admin.client_list())) - 1

    def keys(self, pattern: str) -> list[bytes]:
        return self._ask(lambda admin: admin.keys(pattern))

    def _ask(self, question):
        import redis

        admin = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            return question(admin)
        finally:
            admin.close()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A :class:`RedisServer`, started; stopped after the test in any case."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def on_redis(redis_server, settings) -> RedisServer:
    """The cache and the channel layer on ``redis_server``, as production configures them
    from ``REDIS_URL``."""
    from config.stores import cache_settings, channel_layer_settings

    settings.CACHES = cache_settings(redis_server.url)
    settings.CHANNEL_LAYERS = channel_layer_settings(redis_server.url)
    return redis_server


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """The session's Apache Kafka: ``make test``'s (``KAFKA_TEST_BROKER``), or one of its own."""
    from tests.engines import session_kafka

    with session_kafka(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker
        from tracker.live.embedded import stop_embedded_bridge

        stop_embedded_bridge()  # its consumer would otherwise retry the stopped broker


@pytest.fixture
def kafka_topics(kafka_broker, monkeypatch):
    """Fresh, empty topics for one test: a unique prefix on the shared broker, deleted
    afterwards (the broker's disk stays small over the suite)."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", prefix)
    created = ensure_topics(config=KafkaConfig())
    yield prefix
    from tests.engines import delete_topics_with_prefix

    delete_topics_with_prefix(prefix, also=created)


#: Fixtures that set what the web reads when it starts (its Kafka broker and topics, its
#: channel layer): a test's lifespan starts after whichever of them the test uses.
SERVER_WORLD = ("pinot", "live_pipeline", "pipeline", "kafka_cluster", "kafka_topics", "on_redis")


@pytest.fixture
def _server_world(request: pytest.FixtureRequest) -> Any:
    """The test's world set up first, whatever order the test names its fixtures in; the
    browser tests' server (or None: the app runs in process, on the test's loop)."""
    for name in SERVER_WORLD:
        if name in request.fixturenames:
            request.getfixturevalue(name)
    if "asgi_server" in request.fixturenames:
        return request.getfixturevalue("asgi_server")
    return None


@pytest_asyncio.fixture(loop_scope="session")
async def asgi_lifespan(_server_world: Any) -> AsyncIterator[None]:
    """The web's lifespan around one test, as a server runs it around its life: startup
    once the test's world is set up (the push bridge follows the topics, broker and
    channel layer it reads then), shutdown after the test."""
    from config.asgi import application
    from tests.lifespan import Lifespan

    lifespan = _server_world.lifespan() if _server_world else Lifespan(application)
    await lifespan.startup()
    yield
    await lifespan.shutdown()


# Slow, component-specific fixtures live in their own modules (session-scoped).
pytest_plugins = [
    "tests.fixtures_spark",
    "tests.fixtures_pinot",
    "tests.fixtures_browser",
]

"""Pinot fixtures: the run's Apache Pinot, and ids of each test's own.

One Pinot serves a whole ``make test`` (tests/engines.py): its realtime tables consume
the topics of one prefix and cannot be truncated, so every test that reads through it
publishes there with ids no other test uses:

* ``real_pinot`` (session): the running Pinot (:class:`tests.engines.TestPinot`);
* ``pinot``: per test, ``KAFKA_TOPIC_PREFIX``, ``PINOT_BROKER_URL`` and
  ``PINOT_CONTROLLER_URL`` pointed at it, and a :class:`PinotHarness` to publish
  enriched events with (the real producer) and ``sync()`` on (polls Pinot until they
  are queryable);
* ``id_base``: the first of the test's 100,000 ids. Ids below ``base + 50,000`` are the
  test's to make up (``pinot.base + 1``); a test that reads Pinot and uses the database
  gets its rows' ids from ``base + 50,001`` on (every 64-bit sequence is moved
  there), so database orders, customers and restaurants are unique in Pinot too.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.events import (
    DeliveryStatus,
    Event,
    OrderEnriched,
    OrderItem,
    OrderItemEnriched,
    new_event_id,
    now_ms,
    status_time_field,
)
from runtime import kafka

#: Ids per test, and where the database's part of them starts.
ID_BLOCK = 100_000
DATABASE_IDS = 50_000


def _session_block() -> int:
    """A block per pytest session, later for a later session: make test's two passes
    share one Pinot, so theirs must differ, and lists newest first must show a test's
    own orders before an earlier pass's. The minute since 2026, or one more than the last
    session of the run's Pinot took (recorded beside its server's pid file); then 4,096
    test blocks a session. Below 2**53 (exact in browsers' numbers) for about 40 years."""
    block = (int(time.time()) - 1_767_225_600) // 60
    pidfile = os.environ.get("PINOT_TEST_SERVER_PIDFILE")
    if not pidfile:
        return block
    with open(Path(pidfile).parent / "session-blocks", "a+") as taken:
        fcntl.flock(taken, fcntl.LOCK_EX)
        taken.seek(0)
        block = max(block, int(taken.read() or 0) + 1)
        taken.seek(0)
        taken.truncate()
        taken.write(str(block))
    return block


_SESSION_BLOCK = _session_block()
_TEST_BLOCKS = itertools.count(1)


class PinotHarness:
    """Publish enriched events and wait until Pinot has them."""

    def __init__(self, base: int) -> None:
        self.producer = kafka.producer()
        self.base = base
        self._published: dict[str, list[Event]] = defaultdict(list)

    def publish(self, *events: Event) -> None:
        for event in events:
            kafka.publish(self.producer, event)
            self._published[event.TOPIC.value].append(event)
        assert self.producer.flush(10) == 0

    async def apublish(self, *events: Event) -> None:
        """From async tests: publish, then wait until queryable, off the event loop."""
        await asyncio.to_thread(self.publish, *events)
        await asyncio.to_thread(self.sync)

    def sync(self, timeout: float = 30.0) -> None:
        """Return once every published record is queryable (every row, not only the
        latest per key: ``skipUpsert``), waiting out a server that is not answering."""
        from tracker.tracking.exceptions import TrackingUnavailable
        from tracker.tracking.selectors import query

        def count(sql: str) -> int:
            try:
                rows = query(sql)
            except TrackingUnavailable:
                return -1
            return rows[0]["n"] if rows else 0

        deadline = time.monotonic() + timeout
        for table, events in self._published.items():
            ids = sorted({e.order_id for e in events})
            if table == "order_items_enriched":  # deduplicated by order and line
                expected = len({(e.order_id, e.line) for e in events})
            else:
                expected = len(events)
            sql = (
                f"SELECT COUNT(*) AS n FROM {table} WHERE order_id IN "
                f"({', '.join(map(str, ids))}) OPTION(skipUpsert=true)"
            )
            while count(sql) < expected:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{table}: Pinot did not ingest {expected} records")
                time.sleep(0.1)


@pytest.fixture(scope="session")
def real_pinot(kafka_broker, tmp_path_factory) -> Iterator[Any]:
    """The run's Pinot (``python -m tests.engines``), or one of this session's own."""
    from tests.engines import session_pinot

    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    with session_pinot(tmp_path_factory.mktemp("pinot"), bootstrap) as pinot:
        yield pinot


def next_id_base() -> int:
    """The first id of a new block (a test's, or a module fixture's)."""
    return ((_SESSION_BLOCK << 12) + next(_TEST_BLOCKS)) * ID_BLOCK


@pytest.fixture
def id_base() -> int:
    return next_id_base()


@pytest.fixture
def pinot(request, real_pinot, id_base, monkeypatch) -> Iterator[PinotHarness]:
    """Publish to the topics the run's Pinot consumes and read through its broker.

    The arrival predictor learns from every restaurant's orders of the last hours and
    days, which in the run's Pinot are every earlier test's: unless a test is about that
    learning (``@pytest.mark.eta_history``, tests/integration/tracking/test_eta.py), its learning windows are
    a few seconds long, so it predicts from the defaults, as on a new system."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", real_pinot.kafka_bootstrap)
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", real_pinot.topic_prefix)
    monkeypatch.setenv("PINOT_BROKER_URL", real_pinot.broker_url)
    monkeypatch.setenv("PINOT_CONTROLLER_URL", real_pinot.controller_url)
    if request.node.get_closest_marker("eta_history") is None:
        monkeypatch.setenv("ETA_KITCHEN_WINDOW_MINUTES", "0.05")
        monkeypatch.setenv("ETA_TRAVEL_WINDOW_DAYS", "0.00005")
    harness = PinotHarness(id_base)
    try:
        yield harness
    finally:
        harness.producer.flush(5)


def _database_fixture(request: pytest.FixtureRequest) -> str | None:
    names = request.fixturenames
    marker = request.node.get_closest_marker("django_db")
    if (
        "transactional_db" in names
        or "live_server" in names
        or (marker is not None and marker.kwargs.get("transaction"))
    ):
        return "transactional_db"
    if marker is not None or "db" in names:
        return "db"
    return None


@pytest.fixture(autouse=True)
def _database_ids_of_their_own(request: pytest.FixtureRequest) -> None:
    """Autouse, so it runs before any fixture that creates rows: a test that reads Pinot
    and uses the database gets ids from its own block (see the module's docstring)."""
    if "pinot" not in request.fixturenames:
        return
    database = _database_fixture(request)
    if database is None:
        return
    request.getfixturevalue(database)
    continue_ids_after(request.getfixturevalue("id_base") + DATABASE_IDS)


def continue_ids_after(last: int) -> None:
    """Move every 64-bit auto-increment sequence so the next row gets ``last + 1``."""
    from django.apps import apps
    from django.db import connection

    tables = [
        (model._meta.db_table, model._meta.pk.column)
        for model in apps.get_models()
        if model._meta.managed
        and not model._meta.proxy
        # 64-bit keys only: Pinot's ids are ours; Django's own tables (the admin's log,
        # permissions) keep 32-bit ones, and PostgreSQL refuses to move those past 2**31.
        and model._meta.pk.get_internal_type() == "BigAutoField"
    ]
    with connection.cursor() as cursor:
        for table, column in tables:
            if connection.vendor == "postgresql":
                cursor.execute(
                    "SELECT setval(pg_get_serial_sequence(%s, %s), %s)",
                    [connection.ops.quote_name(table), column, last],
                )
            elif connection.vendor == "sqlite":
                cursor.execute("UPDATE sqlite_sequence SET seq = %s WHERE name = %s", [last, table])
                if cursor.rowcount == 0:
                    cursor.execute(
                        "INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, last]
                    )
            else:
                raise NotImplementedError(f"ids of their own on {connection.vendor}")


# ---------------------------------------------------------------------- event builders

ITEMS = [
    OrderItem(1, "Margherita", "pizza", 2, "8.50"),
    OrderItem(2, "Tiramisu", "dessert", 1, "5.00"),
]


def _envelope(order_id: int, at: int | None, **order: int) -> dict[str, Any]:
    """The fields every enriched record of one order carries (ids default to 1)."""
    return {"event_id": new_event_id(), "event_time": at if at is not None else now_ms(),
            "order_id": order_id, "customer_id": 1, **order}  # fmt: skip


def order_event(
    order_id: int,
    version: int,
    status: str = "PLACED_ORDER",
    *,
    customer_id: int = 1,
    restaurant_id: int = 1,
    created_at: int | None = None,
    status_time: int | None = None,
    total: float = 22.0,
    status_times: dict[str, int] | None = None,
    courier: tuple[int, float, float, int] | None = None,
    **extra: Any,
) -> OrderEnriched:
    """An OrderEnriched record as the stream job would emit it."""
    created = created_at if created_at is not None else now_ms() - 60_000
    entered = status_time if status_time is not None else created
    times = {status_time_field("PLACED_ORDER"): created}
    times.update({status_time_field(s): t for s, t in (status_times or {}).items()})
    times[status_time_field(status)] = entered
    courier_fields = {}
    if courier is not None:
        cid, lat, lon, at = courier
        courier_fields = dict(courier_id=cid, courier_lat=lat, courier_lon=lon, location_time=at)
    return OrderEnriched(
        event_id=new_event_id(),
        event_time=max(entered, created),
        order_id=order_id,
        version=version,
        customer_id=customer_id,
        customer_name=f"Customer {customer_id}",
        restaurant_id=restaurant_id,
        restaurant_name=f"Restaurant {restaurant_id}",
        restaurant_lat=52.52,
        restaurant_lon=13.40,
        delivery_lat=52.53,
        delivery_lon=13.42,
        items=list(ITEMS),
        item_count=3,
        total=total,
        status=status,
        status_time=entered,
        created_at=created,
        **times,
        **courier_fields,
        **extra,
    )


def order_event_of(order: Any, version: int, status: str = "PLACED_ORDER", **extra: Any):
    """The OrderEnriched record of a database order (its customer and restaurant)."""
    return order_event(
        order.pk, version, status, customer_id=order.customer_id,
        restaurant_id=order.restaurant_id, **extra,
    )  # fmt: skip


def delivery_event(
    order_id: int,
    version: int,
    lat: float,
    lon: float,
    *,
    status: str = "OUT_FOR_DELIVERY",
    at: int | None = None,
    courier_id: int = 7,
    restaurant_id: int = 1,
) -> DeliveryStatus:
    return DeliveryStatus(
        **_envelope(order_id, at, restaurant_id=restaurant_id),
        version=version,
        courier_id=courier_id,
        status=status,
        lat=lat,
        lon=lon,
        destination_lat=52.53,
        destination_lon=13.42,
        distance_left_km=1.5,
    )


def item_event(
    order_id: int,
    line: int,
    product: str,
    quantity: int,
    unit_price: float,
    *,
    restaurant_id: int = 1,
    at: int | None = None,
) -> OrderItemEnriched:
    return OrderItemEnriched(
        **_envelope(order_id, at, restaurant_id=restaurant_id),
        line=line,
        restaurant_name=f"Restaurant {restaurant_id}",
        product_id=abs(hash(product)) % 1000,
        product_name=product,
        category="pizza",
        quantity=quantity,
        unit_price=unit_price,
        line_total=round(quantity * unit_price, 2),
    )

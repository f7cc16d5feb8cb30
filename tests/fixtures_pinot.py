"""Pinot fixtures: the local Pinot server fed through the real broker, or a real Pinot.

``pinot`` gives each test a :class:`PinotHarness`. By default it starts the local
server in-process (a few tens of ms) on a free port, consuming the test's own
topic prefix on the session's Kafka broker, and points ``PINOT_BROKER_URL`` at
it. Tests publish enriched events with ``publish()`` (the real producer), call
``sync()`` and query through the selectors (pinotdb over HTTP).

When ``PINOT_BROKER_URL`` is set before the session starts, the same contract
tests run against that Pinot instead: events go to the topics of
``KAFKA_BOOTSTRAP_SERVERS``/``KAFKA_TOPIC_PREFIX`` (the ones its tables consume),
and ``sync()`` polls Pinot until the published records are visible. Tests keep
to their own ids (``harness.base``) so they can share those tables.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from contract import kafka
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

#: Set when the session targets a real Pinot (read once, before fixtures change env).
REAL_PINOT_URL = os.environ.get("PINOT_BROKER_URL", "")


class PinotHarness:
    """Publish enriched events and wait until the Pinot under test has them."""

    def __init__(self, url: str, server: Any = None) -> None:
        self.url = url
        self.server = server
        self.producer = kafka.producer()
        # unique ids per test, so tests can share a real Pinot's tables
        self.base = random.randrange(10_000, 90_000) * 100_000
        self._published: dict[str, list[Event]] = defaultdict(list)

    @property
    def real(self) -> bool:
        return self.server is None

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
        """Return once every published record is queryable."""
        if self.server is not None:
            self.server.ingester.wait_caught_up(timeout)
            return
        from tracker.tracking.selectors import query

        expected = {
            "orders_enriched": len(self._published["orders_enriched"]),
            "delivery_statuses": len(self._published["delivery_statuses"]),
            "order_items_enriched": len(
                {(e.order_id, e.line) for e in self._published["order_items_enriched"]}
            ),
        }
        deadline = time.monotonic() + timeout
        for table, count in expected.items():
            ids = sorted({e.order_id for e in self._published[table]})
            if not ids:
                continue
            sql = (
                f"SELECT COUNT(*) AS n FROM {table} WHERE order_id IN "
                f"({', '.join(map(str, ids))}) OPTION(skipUpsert=true)"
            )
            while query(sql)[0]["n"] < count:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{table}: Pinot did not ingest {count} records")
                time.sleep(0.2)


@pytest.fixture
def pinot(request, monkeypatch) -> Iterator[PinotHarness]:
    """A Pinot fed through the real broker: the local server, or PINOT_BROKER_URL's."""
    if REAL_PINOT_URL:
        monkeypatch.setenv("PINOT_BROKER_URL", REAL_PINOT_URL)
        yield PinotHarness(REAL_PINOT_URL)
        return
    request.getfixturevalue("kafka_topics")  # fresh topics under a unique prefix
    from embedded.pinot_server import LocalPinot

    server = LocalPinot(port=0).start()
    monkeypatch.setenv("PINOT_BROKER_URL", server.url)
    harness = PinotHarness(server.url, server)
    try:
        yield harness
    finally:
        harness.producer.flush(5)
        del harness.producer
        server.stop()


@pytest.fixture
def local_pinot(request):
    """Tests of the local server itself (skipped when the session targets a real Pinot)."""
    if REAL_PINOT_URL:
        pytest.skip("local Pinot server tests do not apply when PINOT_BROKER_URL is set")
    return request.getfixturevalue("pinot")


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

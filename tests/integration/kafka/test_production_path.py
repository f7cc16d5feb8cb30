"""What only PostgreSQL shows: row locks under concurrent writers, the idempotency race,
and several relays publishing one outbox in order.

SQLite serialises every writer on one file lock, so these races cannot happen there;
these tests run when ``DATABASE_URL`` is a PostgreSQL (``make test`` runs them through
``python -m localrun.backends``) and skip otherwise.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections

from contract.events import LIFECYCLE
from tests.factories import make_courier, make_customer, make_restaurant, place
from tests.integration.kafka.test_outbox_relay import (
    _assert_exactly_once_in_order,
    _published_events,
    _wait_drained,
)
from tracker.orders import services
from tracker.orders.models import Order, OrderStatusChange
from tracker.orders.policy import SYSTEM
from tracker.outbox.models import OutboxEvent
from tracker.outbox.relay import Relay

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="PostgreSQL only (localrun/backends.py)"
    ),
]


def _in_threads(n: int, fn):
    """Run ``fn(i)`` in n threads released together; return results or exceptions."""
    barrier = threading.Barrier(n)

    def call(i):
        barrier.wait()
        try:
            return fn(i)
        except Exception as exc:  # noqa: BLE001 - the caller inspects them
            return exc
        finally:
            connections.close_all()  # each thread has its own connection

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(call, range(n)))


def test_concurrent_advances_move_an_order_one_step_each(kafka_topics):
    customer, restaurant = make_customer(), make_restaurant()
    make_courier()
    order = place(customer, restaurant)
    # 6 callers all read PLACED_ORDER and ask for ORDER_CONFIRMED: the row lock lets one win
    target = LIFECYCLE[1]
    results = _in_threads(6, lambda i: services.advance_order(order.pk, by=SYSTEM, to=target))
    won = [r for r in results if isinstance(r, Order)]
    lost = [r for r in results if isinstance(r, services.IllegalTransition)]
    assert len(won) == 1 and len(lost) == 5, results
    # "advance" from many callers at once: every step happens exactly once, in order
    results = _in_threads(8, lambda i: services.advance_order(order.pk, by=SYSTEM))
    steps = [r for r in results if isinstance(r, Order)]
    assert all(isinstance(r, (Order, services.IllegalTransition)) for r in results), results
    history = list(
        OrderStatusChange.objects.filter(order=order).values_list("previous_status", "status")
    )
    walked = [s.value for s in LIFECYCLE[: 2 + len(steps)]]
    assert history == [("", walked[0])] + list(zip(walked, walked[1:], strict=False))
    status_events = OutboxEvent.objects.filter(topic="order_statuses", key=str(order.pk))
    assert status_events.count() == len(history)


def test_the_idempotency_race_places_one_order(kafka_topics):
    customer, restaurant = make_customer(), make_restaurant()
    results = _in_threads(8, lambda i: place(customer, restaurant, idempotency_key="retry-1"))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len({r.pk for r in results}) == 1
    assert Order.objects.filter(customer=customer).count() == 1
    assert OutboxEvent.objects.filter(key=str(results[0].pk)).count() == 2  # orders + status


def test_several_relays_publish_each_event_once_in_order_per_order(kafka_topics):
    customer, restaurant = make_customer(), make_restaurant()
    make_courier()
    orders = [place(customer, restaurant) for _ in range(10)]
    stop = threading.Event()
    relays = [Relay(batch_size=7, poll_seconds=0.01) for _ in range(3)]

    def run(relay: Relay) -> None:
        try:
            relay.run(stop)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(r,)) for r in relays]
    for t in threads:
        t.start()
    try:
        # writers keep committing while three relays compete for the outbox
        for _ in range(4):
            for order in orders:
                services.advance_order(order.pk, by=SYSTEM)
            time.sleep(0.05)
        _wait_drained(60)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    published = [r.published_total for r in relays]
    assert sum(published) == OutboxEvent.objects.count() == 10 * 6, published
    _assert_exactly_once_in_order(_published_events())


def test_a_relay_stands_by_while_another_holds_the_publishing_lock(kafka_topics):
    from tracker.outbox.relay import ADVISORY_LOCK_KEY

    place(make_customer(), make_restaurant())
    relay = Relay()
    relay._prepare_topics()
    with connection.cursor() as other:  # the test's connection plays the publishing relay
        other.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
        try:
            standby = _in_threads(1, lambda i: relay.publish_batch())
        finally:
            other.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
    assert standby == [0] and relay.standby_batches == 1
    assert relay.publish_batch() == 2  # lock free: it publishes

"""A commit wakes the idle relay: the event reaches the broker at once, not at the relay's
next look at the outbox. Runs on SQLite (a datagram after commit) and, in ``make test``'s
second pass, on PostgreSQL (``NOTIFY``)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction

from tests.factories import make_customer, make_restaurant, place
from tracker.outbox.models import OutboxEvent
from tracker.outbox.relay import Relay

pytestmark = pytest.mark.django_db(transaction=True)

#: Without a wake-up the relay would not look again for this long.
ASLEEP_SECONDS = 60.0


def _pending() -> int:
    return OutboxEvent.objects.filter(published_at__isnull=True).count()


def _wait_published(deadline_s: float) -> float:
    started = time.monotonic()
    while _pending() and time.monotonic() - started < deadline_s:
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_commit_wakes_the_idle_relay_and_a_rollback_does_not(kafka_topics):
    customer, restaurant = make_customer(), make_restaurant()
    relay = Relay(poll_seconds=ASLEEP_SECONDS, idle_seconds=ASLEEP_SECONDS)
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"check_topics_every": 600})
    thread.start()
    try:
        while not relay._measured_at:  # its first pass found nothing: it waits now
            time.sleep(0.02)
        time.sleep(0.3)

        place(customer, restaurant)
        assert _pending() == 2  # the order and its first status
        took = _wait_published(10)
        assert _pending() == 0, "the commit did not wake the relay"
        assert took < 3, f"published after {took:.1f} s"
        assert relay.published_total == 2

        # A rolled-back write leaves nothing to publish and no row behind.
        with pytest.raises(RuntimeError), transaction.atomic():
            place(customer, restaurant)
            raise RuntimeError("the caller gives up")
        assert OutboxEvent.objects.count() == 2

        time.sleep(0.3)  # asleep again
        place(customer, restaurant)
        assert _wait_published(10) < 3 and _pending() == 0
        assert relay.published_total == 4
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive(), "the relay did not stop within 5 s of being asked"

"""A commit wakes the idle relay: the event reaches the broker because of the commit's
wake-up, not at the relay's next look at the outbox (that is 10 minutes away here, so
nothing else can deliver before the deadline). Runs on SQLite (a datagram after commit)
and, in ``make test``'s second pass, on PostgreSQL (``NOTIFY``). How soon it arrives is
a latency, measured in bench/, not here."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from tests.factories import make_customer, make_restaurant, place
from tests.waiting import wait_until
from tracker.outbox import wakeup
from tracker.outbox.models import OutboxEvent
from tracker.outbox.relay import Relay

pytestmark = pytest.mark.django_db(transaction=True)

#: Without a wake-up the relay would not look again for this long.
ASLEEP_SECONDS = 600.0
#: Far more than a wake-up needs on a loaded machine, far less than ASLEEP_SECONDS.
DEADLINE = 30.0


def _pending() -> int:
    return OutboxEvent.objects.filter(published_at__isnull=True).count()


@pytest.fixture
def asleep(monkeypatch) -> threading.Event:
    """Set while the relay waits for a wake-up (after a pass that found nothing)."""
    waiting = threading.Event()
    original = wakeup.Waiter.wait

    def wait(self: wakeup.Waiter, timeout: float, stop: threading.Event) -> bool:
        waiting.set()
        try:
            return original(self, timeout, stop)
        finally:
            waiting.clear()

    monkeypatch.setattr(wakeup.Waiter, "wait", wait)
    return waiting


def test_a_commit_wakes_the_idle_relay_and_a_rollback_leaves_nothing(kafka_topics, asleep):
    customer, restaurant = make_customer(), make_restaurant()
    relay = Relay(poll_seconds=ASLEEP_SECONDS, idle_seconds=ASLEEP_SECONDS)
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"check_topics_every": 600})
    thread.start()
    try:
        assert asleep.wait(DEADLINE), "the relay's first pass did not end in a wait"

        place(customer, restaurant)
        assert OutboxEvent.objects.count() == 2  # the order and its first status
        wait_until(lambda: relay.published_total == 2, DEADLINE, "the commit to wake the relay")
        assert _pending() == 0

        # A rolled-back write leaves nothing to publish and no row behind.
        with pytest.raises(RuntimeError), transaction.atomic():
            place(customer, restaurant)
            raise RuntimeError("the caller gives up")
        assert OutboxEvent.objects.count() == 2

        assert asleep.wait(DEADLINE), "the relay did not go back to waiting"
        place(customer, restaurant)
        wait_until(lambda: relay.published_total == 4, DEADLINE, "the second commit's wake-up")
        assert _pending() == 0
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive(), "the relay did not stop within 5 s of being asked"

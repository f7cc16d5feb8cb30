"""The simulator waits out a database outage and goes on (the fault drill's PostgreSQL
fault once ended the whole system: the simulator exited on the first refused query, its
restarts failed the same way, and the supervisor gave up on it)."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import seed_small_world
from tracker.orders.models import Order
from tracker.simulator.engine import SimConfig, Simulation, VirtualClock


@pytest.mark.django_db(transaction=True)
def test_the_simulator_postpones_what_the_database_refuses_and_goes_on(
    kafka_topics, database_outage
):
    seed_small_world()
    start = datetime.now(tz=UTC).replace(microsecond=0) - timedelta(hours=1)
    sim = Simulation(
        random.Random(5), SimConfig(orders_per_minute=20, pace=20), VirtualClock(start)
    )
    database_outage.start()
    back = threading.Timer(3.0, database_outage.end)  # the server back while the run goes on
    back.start()
    try:
        stats = sim.run(duration=10 * 60)
    finally:
        back.cancel()
    database_outage.end()
    assert stats["postponed"] >= 2  # about one a second while the server was away
    assert stats["placed"] > 50 and Order.objects.count() == stats["placed"]

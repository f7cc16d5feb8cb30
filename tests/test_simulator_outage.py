"""The simulator waits out a database outage and goes on (the fault drill's PostgreSQL
fault once ended the whole system: the simulator exited on the first refused query, its
restarts failed the same way, and the supervisor gave up on it)."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from localrun.kafka import free_port
from tests.factories import seed_small_world
from tracker.orders.models import Order
from tracker.simulator.engine import SimConfig, Simulation, VirtualClock


@pytest.mark.django_db(transaction=True)
def test_the_simulator_postpones_what_the_database_refuses_and_goes_on(kafka_topics):
    connection = connections["default"]
    if connection.vendor != "postgresql":
        pytest.skip("needs a database server to lose: run on PostgreSQL (make test's second run)")
    seed_small_world()
    start = datetime.now(tz=UTC).replace(microsecond=0) - timedelta(hours=1)
    sim = Simulation(
        random.Random(5), SimConfig(orders_per_minute=20, pace=20), VirtualClock(start)
    )
    saved = dict(connection.settings_dict)
    connection.close()
    # A real refusal: nothing listens on this port until the timer puts the server back.
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    back = threading.Timer(3.0, lambda: connection.settings_dict.update(saved))
    back.start()
    try:
        stats = sim.run(duration=10 * 60)
    finally:
        back.cancel()
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert stats["postponed"] >= 2  # about one a second while the server was away
    assert stats["placed"] > 50 and Order.objects.count() == stats["placed"]

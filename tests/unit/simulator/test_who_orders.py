"""Who the simulator's orders are for (issue 71's ``make run``): a customer who hears about
their orders (push subscribed, or email on) orders with the first placement after they
appear and then once in every as many placements as there are customers, so a person
watching their phone or mailbox sees a notification within the first minute; how many
orders there are stays the load's."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import seed_small_world
from tracker.customers.models import Customer
from tracker.notifications import services
from tracker.simulator.engine import SimConfig, Simulation, VirtualClock

pytestmark = pytest.mark.django_db


def _simulation() -> Simulation:
    start = datetime.now(tz=UTC) - timedelta(hours=1)
    return Simulation(random.Random(3), SimConfig(log_limit=0), VirtualClock(start))


def _customers_of(sim: Simulation, placements: int) -> list[int]:
    return [sim.place_one().customer_id for _ in range(placements)]


def test_customers_told_of_their_orders_order_first_and_then_every_round():
    seed_small_world()
    sim = _simulation()
    customers = Customer.objects.count()
    before = _customers_of(sim, 5)  # nobody is told of anything yet: drawn at random
    watched = list(Customer.objects.order_by("id")[:2])
    for customer in watched:
        services.change_preferences(customer, email_enabled=True)
    after = _customers_of(sim, 2 * customers + 2)
    ids = [c.pk for c in watched]
    assert after[:2] == ids  # the first two placements after they turned email on
    for i, customer_id in enumerate(ids):
        turns = {n for n, who in enumerate(after) if who == customer_id}
        # Then one turn in every `customers` placements (a random draw may add others).
        assert {i, customers + i, 2 * customers + i} <= turns
    assert len(before) + len(after) == sim.stats["placed"]


def test_without_anyone_told_every_order_goes_to_a_random_customer():
    seed_small_world()
    first = _customers_of(_simulation(), 30)
    assert len(set(first)) > 10

"""The simulator is deterministic for a seed and drives the system only through the services."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from contract.events import LIFECYCLE, OrderStatus, Topic, parse_event
from runtime import kafka
from tests.factories import seed_small_world
from tracker.orders.models import Order, OrderStatusChange
from tracker.outbox.models import OutboxEvent
from tracker.simulator.engine import SimConfig, Simulation, VirtualClock

START = datetime.now(tz=UTC).replace(microsecond=0) - timedelta(hours=1)
CONFIG = SimConfig(orders_per_minute=20, pace=20)


def _run(seed: int, minutes: float = 15) -> tuple[list[tuple], dict]:
    sim = Simulation(random.Random(seed), CONFIG, VirtualClock(START))
    stats = sim.run(duration=minutes * 60)
    return sim.log, stats


@pytest.mark.django_db(transaction=True)
def test_same_seed_same_business_day(kafka_topics):
    seed_small_world()
    first_log, first_stats = _run(seed=11, minutes=10)
    Order.objects.all().delete()
    OutboxEvent.objects.all().delete()
    second_log, second_stats = _run(seed=11, minutes=10)
    assert first_stats == second_stats
    assert first_log == second_log
    assert (
        # Rides are never paced and traffic follows the hour (START is wall-clock based),
        # so how many rides finish in 10 minutes depends on the hour: at least one does.
        first_stats["placed"] > 100 and first_stats["delivered"] > 0 and first_stats["points"] > 100
    )
    third_log, _ = _run(seed=12, minutes=2)
    assert third_log != first_log


@pytest.mark.django_db(transaction=True)
def test_simulated_orders_follow_the_lifecycle_and_emit_every_event(kafka_topics):
    seed_small_world()
    _, stats = _run(seed=5, minutes=9)
    # Every status change is in the outbox, through the same services the API uses.
    assert OutboxEvent.objects.filter(topic=Topic.ORDERS).count() == stats["placed"]
    assert (
        OutboxEvent.objects.filter(topic=Topic.ORDER_STATUSES).count()
        == OrderStatusChange.objects.count()
    )
    for order in Order.objects.filter(status=OrderStatus.DELIVERED)[:20]:
        history = list(
            order.status_changes.order_by("changed_at", "id").values_list("status", flat=True)
        )
        assert history == [s.value for s in LIFECYCLE]
    # GPS points went straight to Kafka, each a valid event of an order that was in transit.
    points = kafka.read_topic(Topic.DELIVERY_LOCATIONS, idle_timeout=0.3)
    assert len(points) == stats["points"]
    in_transit = set(
        OrderStatusChange.objects.filter(status=OrderStatus.OUT_FOR_DELIVERY).values_list(
            "order_id", flat=True
        )
    )
    for record in points[:200]:
        event = parse_event(Topic.DELIVERY_LOCATIONS, record.value)
        assert event.order_id in in_transit
        assert record.key == str(event.order_id).encode()
        assert json.loads(record.value)["schema_version"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_simulator_without_an_action_log_keeps_no_state_per_order(kafka_topics):
    """`manage.py simulate` runs for hours: what it keeps must not grow with every order."""
    seed_small_world()
    config = SimConfig(orders_per_minute=20, pace=20, log_limit=0)
    sim = Simulation(random.Random(3), config, VirtualClock(START))
    stats = sim.run(duration=4 * 60)
    assert stats["placed"] > 50 and stats["points"] > 0
    assert len(sim.log) == 0
    assert sim._order_number == {}
    # Only orders still riding are tracked; finished rides are let go.
    riding = Order.objects.filter(status__in=["OUT_FOR_DELIVERY", "ARRIVING_AT_DOOR"]).count()
    assert len(sim.transits) <= riding


@pytest.mark.django_db
def test_a_pinned_traffic_rides_at_the_same_speed_at_every_hour():
    """Benchmarks pin the traffic (``SIMULATOR_TRAFFIC``) so a level carries the same GPS
    points an order at any hour; unpinned, the rush hour slows the couriers."""
    seed_small_world()

    def speed(traffic: float | None, hour: int) -> float:
        clock = VirtualClock(START.replace(hour=hour))
        return Simulation(random.Random(1), SimConfig(traffic=traffic), clock)._speed_kmh()

    assert speed(1.06, 3) == speed(1.06, 18)
    assert speed(None, 18) < speed(None, 3)  # 0.6 against 1.3 times the free speed

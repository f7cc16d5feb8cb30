"""One definition of load in real units (contract/load.py, issue 70)."""

import pytest

from contract.load import (
    BOOK_PEAK_ORDERS_PER_MINUTE,
    POINTS_PER_ORDER,
    Load,
    equivalent,
)


def test_one_x_is_the_books_peak_with_the_simulators_points_and_statuses():
    one = Load(1)
    assert one.orders_per_minute == BOOK_PEAK_ORDERS_PER_MINUTE == 50
    assert one.points_per_second == pytest.approx(50 / 60 * POINTS_PER_ORDER)  # 825
    assert one.status_changes_per_second == pytest.approx(5.75)
    assert one.describe() == "1x (50 orders/min, 5.8 status changes/s, 825 GPS points/s)"


def test_every_unit_scales_with_the_level_and_a_measured_rate_names_its_level():
    five = Load(5)
    assert five.orders_per_minute == 250
    assert five.points_per_second == pytest.approx(5 * Load(1).points_per_second)
    assert Load.of_orders(100).multiple == 2
    assert Load.of_points(five.points_per_second).multiple == pytest.approx(5)


def test_a_benchmarks_orders_with_fewer_points_are_a_smaller_real_level():
    """The stream benchmark's orders bring 27 events (placed, 6 statuses, 20 points): its
    "100x" and "10x" in orders are 2.7x and 0.27x of the simulator's events."""
    assert equivalent(100, 27).multiple == pytest.approx(2.7, abs=0.01)
    assert equivalent(10, 27).multiple == pytest.approx(0.27, abs=0.001)
    assert equivalent(3, 1 + 6.9 + POINTS_PER_ORDER).multiple == pytest.approx(3)

"""Load in real units: the one definition the simulator, the benchmarks and the capacity
figures share (issue 70).

"1x" used to mean only "50 orders a minute", and the benchmarks that sent 20 GPS points an
order called a tenth of the simulator's points "10x". A level is stated here in what the
system carries: orders a minute, status changes a second and GPS points a second, from
the simulator's own event mix: one point a second per courier on the road, so a delivered
order brings its ride's length in points (about 990) and about seven status changes. Status changes and points follow from the
orders; only the orders a minute are chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The book's peak: 1x, in orders a minute.
BOOK_PEAK_ORDERS_PER_MINUTE = 50.0
#: ``order_statuses`` records an order brings, its PLACED_ORDER included (seven for a
#: delivered order, fewer for the 3% cancelled): 5.72 a second at 50 orders a minute,
#: minutes 30-120 of ``longrun-20261128-121347.json`` (docs/operations.md 4.7).
STATUS_CHANGES_PER_ORDER = 6.9
#: GPS points an order brings at the simulator's one point a second per courier on the
#: road: its ride plus its wait at the door. Measured in ``make run``: 822 a second at 50
#: orders a minute (minutes 30-120 of the 2-hour run of 2026-11-28; b2902be on 2026-12-07
#: agrees). The rides'
#: length follows the hour's traffic (the simulator's ``TRAFFIC_BY_HOUR``, speed x0.6-1.3),
#: so a run at a rush hour carries more points an order unless its traffic is pinned
#: (``SIMULATOR_TRAFFIC``, :data:`REFERENCE_TRAFFIC`).
POINTS_PER_ORDER = 990
#: The traffic factor (courier speed x this) at which the simulator's rides bring
#: :data:`POINTS_PER_ORDER`: rides of 1,037 s at 20 km/h on the demo city (docs/operations.md
#: 4.1) take 1,037 / 1.06 = 978 s, plus 40 s at the door, of which 97% of orders ride.
#: Benchmarks pin it so a level carries the same points at any hour.
REFERENCE_TRAFFIC = 1.06


@dataclass(frozen=True)
class Load:
    """One level of load: ``multiple`` x the book's peak, and what that is in real units."""

    multiple: float

    @classmethod
    def of_orders(cls, orders_per_minute: float) -> Load:
        return cls(orders_per_minute / BOOK_PEAK_ORDERS_PER_MINUTE)

    @classmethod
    def of_points(cls, points_per_second: float) -> Load:
        """The level a measured GPS point rate stands for."""
        return cls(points_per_second / cls(1).points_per_second)

    @property
    def orders_per_minute(self) -> float:
        return BOOK_PEAK_ORDERS_PER_MINUTE * self.multiple

    @property
    def orders_per_second(self) -> float:
        return self.orders_per_minute / 60

    @property
    def status_changes_per_second(self) -> float:
        return self.orders_per_second * STATUS_CHANGES_PER_ORDER

    @property
    def points_per_second(self) -> float:
        return self.orders_per_second * POINTS_PER_ORDER

    @property
    def events_per_second(self) -> float:
        """Every source event: orders placed, status changes and points."""
        return self.orders_per_second + self.status_changes_per_second + self.points_per_second

    def describe(self) -> str:
        """``2x (100 orders/min, 10.0 status changes/s, 1,650 GPS points/s)``."""
        return (
            f"{self.multiple:g}x ({self.orders_per_minute:,.0f} orders/min, "
            f"{self.status_changes_per_second:.1f} status changes/s, "
            f"{self.points_per_second:,.0f} GPS points/s)"
        )


#: Source events an order brings in the simulator's mix: it, its statuses and its points.
EVENTS_PER_ORDER = 1 + STATUS_CHANGES_PER_ORDER + POINTS_PER_ORDER


def equivalent(multiple: float, events_per_order: float) -> Load:
    """The level, in the simulator's source events a second, of ``multiple`` x the book's
    orders each bringing ``events_per_order`` events: the stream benchmark's orders bring
    27 (placed, 6 statuses, 20 points), so its "100x" is 100 x 27 / 997.9 = 2.7x."""
    return Load(multiple * events_per_order / EVENTS_PER_ORDER)


#: The capacity ladder's levels (``python -m bench capacity``). Kafka's local byte cap and
#: Pinot's flush thresholds are sized together for the highest (pinot/deployment.py).
CAPACITY_LEVELS = (1.0, 2.0, 3.0, 5.0, 8.0)

#: What the stream job writes to each enriched topic per GPS point at the simulator's mix:
#: (records a point, bytes a record takes in Kafka's log, after the sink's zstd). Measured
#: over 8 minutes (minutes 4-12) of a ``make run``-like system at 1x on 2026-12-07, the
#: broker's log files before and after (docs/performance.md, "Kafka bytes per GPS point");
#: a micro-batch folds an order's changes within it into one record, so at the 2 s
#: trigger a point makes about half a record of each.
ENRICHED_PER_POINT: dict[str, tuple[float, float]] = {
    "orders_enriched": (0.54, 205.0),
    "delivery_statuses": (0.53, 85.0),
    "order_items_enriched": (0.007, 158.0),
}

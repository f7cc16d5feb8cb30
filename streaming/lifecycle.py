"""The lifecycle rules over an order's folded state, all by event time.

The current status is the highest-ranked status reached; a cancel counts only if it came
before the food left, and statuses after a counted cancel are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from contract import geo
from contract.events import (
    CANCELLABLE_STATUSES,
    IN_TRANSIT_STATUSES,
    LIFECYCLE,
    OrderStatus,
    status_rank,
    status_time_field,
)


def apply_rules(state: DataFrame) -> DataFrame:
    """Apply the lifecycle rules to the raw status times (all by event time): the status
    times that count, the current status and its time, the distance left, and whether
    the latest point was taken on the road."""
    raw = {s: F.col(f"raw_{status_time_field(s)}") for s in OrderStatus}
    cancelled = raw[OrderStatus.CANCELLED]
    left_at = F.least(*(raw[s] for s in LIFECYCLE if s not in CANCELLABLE_STATUSES))
    cancel_counts = F.col("cancel_counts")
    ruled = state.withColumn(
        "cancel_counts",
        cancelled.isNotNull() & F.coalesce(cancelled < left_at, F.lit(True)),
    )
    # An order event is its placement, whether or not a PLACED_ORDER status came.
    reached = {
        **raw,
        OrderStatus.PLACED_ORDER: F.coalesce(raw[OrderStatus.PLACED_ORDER], F.col("o.event_time")),
    }
    for s, t in reached.items():
        if s is OrderStatus.CANCELLED:
            counted = F.when(cancel_counts, t)
        else:
            counted = F.when(cancel_counts & (t > cancelled), None).otherwise(t)
        ruled = ruled.withColumn(status_time_field(s), counted)

    status = F.col("status")
    by_rank = sorted(OrderStatus, key=status_rank, reverse=True)
    current = _case((F.col(status_time_field(s)).isNotNull(), s.value) for s in by_rank)
    status_time = _case((status == s.value, F.col(status_time_field(s))) for s in OrderStatus)
    loc = F.col("loc")
    km = _haversine_km(loc["lat"], loc["lon"], F.col("o.delivery_lat"), F.col("o.delivery_lon"))
    out_at = F.col(status_time_field(OrderStatus.OUT_FOR_DELIVERY))
    return (
        ruled.withColumn("status", current)
        .withColumn("status_time", status_time)
        .withColumn(
            "distance_left_km",
            F.when(loc.isNull(), None)
            .when(status == OrderStatus.DELIVERED.value, F.lit(0.0))
            .otherwise(F.round(km, 4)),
        )
        .withColumn(
            "on_the_road",
            status.isin([s.value for s in IN_TRANSIT_STATUSES])
            & loc.isNotNull()
            & (loc["time"] >= out_at),
        )
    )


def _haversine_km(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Spark's twin of :func:`contract.geo.haversine_km` (same operations, same order)."""
    a = F.pow(F.sin((F.radians(lat2) - F.radians(lat1)) / 2), 2) + F.cos(F.radians(lat1)) * F.cos(
        F.radians(lat2)
    ) * F.pow(F.sin(F.radians(lon2 - lon1) / 2), 2)
    return 2 * geo.EARTH_RADIUS_KM * F.asin(F.least(F.lit(1.0), F.sqrt(a)))


def _case(branches: Iterable[tuple[Column, Any]]) -> Column:
    """``CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... END``: NULL when no condition holds."""
    (condition, value), *rest = branches
    case = F.when(condition, value)
    for condition, value in rest:
        case = case.when(condition, value)
    return case

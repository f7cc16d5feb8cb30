"""When an order will arrive: a prediction with a range, from placement to the door.

The parts, each with one concern: ``stats`` (what is known of the city's kitchens, doors
and roads, measured in Pinot), ``prediction`` (the arrival of one order from them) and
:mod:`tracker.cache.statistics` (the statistics cached per process, refreshed in the
background). Callers import this package; each name has one home module.
"""

from tracker.cache.statistics import current_statistics, refresh
from tracker.tracking.eta.prediction import (
    Prediction,
    Trip,
    predict,
    promised_arrival,
    running_late_seconds,
)
from tracker.tracking.eta.stats import Statistics, load_statistics

__all__ = [
    "Trip",
    "Prediction",
    "predict",
    "promised_arrival",
    "running_late_seconds",
    "Statistics",
    "load_statistics",
    "current_statistics",
    "refresh",
]

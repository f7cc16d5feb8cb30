"""Spark Structured Streaming job: joins orders, statuses and courier points per order.

``python -m streaming`` runs it (see :mod:`streaming.__main__`); the join rules
live in :mod:`streaming.join` as a pure function, unit-tested without Spark.
"""

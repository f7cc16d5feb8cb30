"""Pinot: the tables, as files, and the one loader that creates them in Apache Pinot.

``tables/`` holds each table's schema and config; :mod:`pinot.definitions` loads them
and checks them against the event contract, and :mod:`pinot.loader` creates or updates
them through a controller's REST API (``make run``, the tests and compose's
``pinot-init``).
"""

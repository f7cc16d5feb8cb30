"""Pinot: the tables, as files, and the one loader that creates them in Apache Pinot.

``tables/`` holds each table's schema and config; :mod:`pinot.definitions` loads them
and checks them against the event contract, :mod:`pinot.deployment` fills in what each
deployment sets, and :mod:`pinot.loader` creates or updates them through a controller's
REST API (``make run``, the tests and compose's ``pinot-init``), refusing what
:mod:`pinot.changes` finds Pinot cannot apply to a live table.
"""

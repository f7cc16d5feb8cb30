"""Pinot: the table definitions production loads, and the stand-in's engine.

``tables/`` holds each table's schema and config, and :mod:`pinot.definitions` loads
and checks them against the event contract (production's ``pinot-init`` uses it too).
:mod:`pinot.ingest`, :mod:`pinot.store` and :mod:`pinot.sql` are the embedded mode's
Pinot stand-in (Kafka ingestion into DuckDB, Pinot SQL translated to DuckDB), which
:mod:`embedded.pinot_server` serves over Pinot's broker API; production runs Apache Pinot.
"""

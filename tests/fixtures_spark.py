"""Spark fixtures (session-scoped SparkSession, streaming job runner).

One SparkSession serves every Spark test (starting one costs 7-16 s); each test
gets its own topics (``kafka_topics``) and checkpoint directory, and runs the
job with ``availableNow`` so it returns as soon as the input is processed.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark(kafka_broker):
    """A local SparkSession with Spark's Kafka connector (as the job runs)."""
    from streaming.session import spark_session
    from streaming.settings import Settings

    # py4j logs at INFO while shutting down, after pytest has closed its capture streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = spark_session(Settings(shuffle_partitions=2), app_name="ordertrack-tests")
    yield session
    session.stop()


@pytest.fixture
def run_stream(spark, kafka_topics, tmp_path):
    """Run the job once over what is in the test's topics (``availableNow``).

    Returns a callable ``run(checkpoint=None, **settings)`` that answers the query's
    last progress; the default checkpoint directory is shared by calls within one test
    so restarts resume from it.
    """
    from streaming.job import start_query
    from streaming.settings import Settings

    def run(checkpoint: Path | None = None, **overrides):
        settings = replace(
            Settings(),
            checkpoint_dir=str(checkpoint or tmp_path / "checkpoint"),
            available_now=True,
            **overrides,
        )
        query = start_query(spark, settings)
        try:
            query.awaitTermination(120)
            if query.exception() is not None:
                raise AssertionError(f"streaming query failed: {query.exception()}")
            assert not query.isActive, "availableNow query did not finish within 120 s"
            return query.lastProgress
        finally:
            if query.isActive:
                query.stop()

    return run

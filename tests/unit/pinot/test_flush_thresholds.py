"""Kafka's local byte cap outlives Pinot's consuming segments at the highest capacity level
(issue 70): the loader refuses flush thresholds the cap can outrun."""

import copy
import dataclasses

import pytest

from contract.load import CAPACITY_LEVELS
from pinot import deployment
from pinot.definitions import load_tables
from runtime.conf import LOCAL_RETENTION_BYTES

MAKE_RUN = deployment.Settings(
    controller_url="http://127.0.0.1:1",
    kafka_bootstrap="k:9092",
    topic_prefix="",
    kafka_retention_ms=3 * 24 * 3600 * 1000,
    kafka_retention_bytes=LOCAL_RETENTION_BYTES,
    kafka_partitions=3,
)


def with_thresholds(name: str, time: str, rows: str):  # noqa: ANN201 - a TableDef
    table = load_tables()[name]
    config = copy.deepcopy(table.config)
    stream = config["tableIndexConfig"]["streamConfigs"]
    stream["realtime.segment.flush.threshold.time"] = time
    stream["realtime.segment.flush.threshold.rows"] = rows
    return dataclasses.replace(table, config=config)


@pytest.mark.parametrize("name", sorted(load_tables()))
def test_every_shipped_table_commits_before_make_runs_byte_cap_deletes_its_start(name):
    table = load_tables()[name]
    deployment.table_config(table, MAKE_RUN)  # raises if the cap could outrun it
    span = deployment.segment_span_bytes(table, MAKE_RUN.kafka_partitions)
    assert span <= deployment.CAP_SHARE * LOCAL_RETENTION_BYTES


def test_a_flush_the_cap_outruns_at_the_highest_level_is_refused_with_its_reason():
    six_hours = with_thresholds("orders_enriched", "6h", "0")
    with pytest.raises(deployment.LoaderError) as refused:
        deployment.table_config(six_hours, MAKE_RUN)
    said = str(refused.value)
    assert said.startswith("orders_enriched: at ")
    assert f"{max(CAPACITY_LEVELS):g}x (" in said
    assert "KAFKA_RETENTION_BYTES" in said
    # More partitions share the same records: each partition's cap lasts longer.
    many = dataclasses.replace(MAKE_RUN, kafka_partitions=3000)
    deployment.table_config(six_hours, many)


def test_without_a_byte_cap_only_the_time_retention_bounds_the_flush():
    production = dataclasses.replace(MAKE_RUN, kafka_retention_bytes=-1)
    deployment.table_config(with_thresholds("orders_enriched", "6h", "0"), production)
    with pytest.raises(deployment.LoaderError, match="is not below Kafka's retention"):
        deployment.table_config(with_thresholds("orders_enriched", "3d", "0"), production)

"""Real-time mode: the job's plan under ``trigger(realTime=...)`` and Spark's allowlist.

Real-time mode runs a stateful query (the join) from Spark 4.3 on. The project pins
Spark 4.2.0, the newest whose Kafka connector Maven Central serves, so the job refuses
``STREAMING_REAL_TIME`` with the reason; the plan test below runs once the pin moves to
4.3. Spark's own low-latency memory stream supports real-time mode too, so this test
gives it the Kafka source's columns and starts the job's steps on it: the same parse,
validation, join (update mode, RocksDB, checkpoint format 2) and trigger
(:func:`streaming.job.with_trigger`), into a ``foreach`` sink (allowlisted, as the
``kafka`` sink is). Spark checks every operator and the sink against
``RealTimeModeAllowlist`` when it plans the long-running batch
(``spark.sql.streaming.realTimeMode.allowlistCheck``) and fails the query otherwise; the
test also compares the executed plan's operator names with the allowlist itself. It
checks the plan, not the records: a real-time batch's first records take 20 s and more
to come out on this shared two-core machine (docs/operations.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

ALLOWLIST = "org.apache.spark.sql.execution.streaming.runtime.RealTimeModeAllowlist$"


def allowed_operators(spark) -> set[str]:
    """The class names Spark's ``RealTimeModeAllowlist`` accepts (a private field)."""
    jvm = spark.sparkContext._jvm
    cls = jvm.java.lang.Class.forName(ALLOWLIST)
    field = cls.getDeclaredField("allowedOperators")
    field.setAccessible(True)
    names = field.get(cls.getField("MODULE$").get(None))
    return set(jvm.scala.jdk.javaapi.CollectionConverters.asJava(names))


def operator_names(plan) -> list[str]:
    """Every node of a physical plan (a JVM ``SparkPlan``), as class names."""
    names, stack = [], [plan]
    while stack:
        node = stack.pop()
        names.append(node.getClass().getName())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return names


def test_real_time_mode_is_refused_with_its_reason_on_a_spark_older_than_4_3():
    from streaming.settings import Settings, real_time_supported, spark_version

    if real_time_supported():
        pytest.skip(f"Spark {spark_version()} runs real-time mode")
    with pytest.raises(ValueError, match=r"Spark 4\.3 or later .* Maven Central serves no 4\.3\.0"):
        Settings(real_time="5 seconds")


@pytest.mark.spark
def test_the_join_runs_in_real_time_mode_on_allowlisted_operators(spark, tmp_path: Path):
    from pyspark.sql import DataFrame

    from streaming import enrich
    from streaming.job import with_trigger
    from streaming.settings import Settings, real_time_supported, spark_version

    if not real_time_supported():
        pytest.skip(
            f"real-time mode runs a stateful query from Spark 4.3 on; this is {spark_version()}"
        )
    jvm = spark.sparkContext._jvm
    settings = Settings(real_time="5 seconds", shuffle_partitions=1)
    # Runtime settings of this query only: real-time mode's checkpoint format, and one
    # shuffle partition, so the source's task and the aggregation's fit local[2]'s slots.
    saved = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions",)}
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    memory = jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(
        spark._jsparkSession, 1, jvm.org.apache.spark.sql.Encoders.STRING()
    )
    # "topic|json" lines, as the Kafka source's columns.
    source = DataFrame(memory.toDF(), spark).selectExpr(
        "encode(get_json_object(substr(value, instr(value, '|') + 1), '$.order_id'), 'UTF-8') AS key",
        "encode(substr(value, instr(value, '|') + 1), 'UTF-8') AS value",
        "substring_index(value, '|', 1) AS topic",
        "0 AS partition",
        "0L AS offset",
        "current_timestamp() AS timestamp",
    )
    writer = (
        enrich.outputs(source)
        .writeStream.outputMode("update")
        .foreach(lambda row: None)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    query = with_trigger(writer, settings).start()
    try:
        # The allowlist is checked when the first long-running batch is planned.
        deadline, plan = time.monotonic() + 60, None
        while plan is None and time.monotonic() < deadline and query.exception() is None:
            execution = query._jsq.streamingQuery().lastExecution()
            plan = execution.executedPlan() if execution is not None else None
            time.sleep(0.1)
        # A plan outside the allowlist fails the query as the batch starts.
        assert not query.awaitTermination(2), query.exception()
        assert plan is not None, "the real-time query planned no batch within 60 s"
        names = operator_names(plan)
        assert spark.conf.get("spark.sql.streaming.realTimeMode.allowlistCheck") == "true"
        assert set(names) - allowed_operators(spark) == set()
        short = {n.rsplit(".", 1)[1] for n in names}
        # The join's aggregation, planned for real-time mode (not HashAggregateExec with a
        # StateStoreRestore/Save pair, as under a micro-batch trigger).
        assert {"StatefulStreamlineAggregateExec", "RealTimeStreamScanExec"} <= short
        assert "HashAggregateExec" not in short
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.stateStore.checkpointFormatVersion")
        for key, value in saved.items():
            spark.conf.set(key, value)

"""The order join as named DataFrame steps: parse, validate, fold per order, apply the
rules, route.

:func:`outputs` turns a DataFrame with the Kafka source's columns (key, value,
topic, partition, offset, timestamp) into ``(topic, key, value)`` rows to produce.
It is the same on a streaming DataFrame (the job) and a static one (the fast
tests), and every step is a JVM operator: no Python UDF, no driver-side rows.

* :func:`parse` gives each value a VARIANT, whose per-field JSON types the checks read.
* :func:`validate` names what is wrong with a message, ``invalid <field>: <reason>``
  as ``parse_event`` names it, and types the event by its topic's Spark schema; the
  checks, their order and the schemas come from the contract's rule table
  (:mod:`streaming.validation`), which builds the verdict and the reason as SQL.
* :func:`~streaming.join.to_slots` and :func:`~streaming.join.fold_per_order` are the
  stateful join (:mod:`streaming.join`): one streaming aggregation folds the three
  topics into one row per order, kept until the watermark passes its placement time
  plus the retention; dead letters are finished records in slots of their own, so the
  plan is a single branch and the source is read and parsed once per micro-batch.
* :func:`~streaming.lifecycle.apply_rules` decides the status by event time
  (:mod:`streaming.lifecycle`).
* :func:`~streaming.records.route` gives the records each updated group writes, with
  deterministic event ids, so a re-run batch writes byte-identical records
  (:mod:`streaming.records`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.join import DEFAULT_RETENTION, fold_per_order, to_slots
from streaming.lifecycle import apply_rules
from streaming.records import route
from streaming.validation import (
    SOURCE_EVENTS,
    check_table,
    object_map,
    struct_type,
    validation_reason,
    validation_verdict,
)

#: The name of the per-batch observed metrics (``observedMetrics`` in the query progress).
DEAD_LETTER_METRICS = "dead_letters"


def outputs(
    source: DataFrame,
    *,
    input_prefix: str = "",
    output_prefix: str = "",
    retention: str = DEFAULT_RETENTION,
) -> DataFrame:
    """Every record the job produces for ``source``: columns topic, key, value."""
    validated = observe_dead_letters(validate(parse(source, input_prefix)))
    state = fold_per_order(to_slots(validated, output_prefix), retention)
    return route(apply_rules(state), output_prefix)


def parse(source: DataFrame, input_prefix: str = "") -> DataFrame:
    """Source rows -> one row per message: its logical topic, and its value as a VARIANT
    (``v``) and as a map of fields (``m``), which the checks read."""
    return (
        source.select(
            "key",
            "value",
            F.substr("topic", F.lit(len(input_prefix) + 1)).alias("source_topic"),
            "partition",
            "offset",
            # A dead letter's place in the watermark: when the broker took the message,
            # never ahead of now (see streaming.join.to_slots).
            F.least(F.coalesce("timestamp", F.current_timestamp()), F.current_timestamp()).alias(
                "received_ts"
            ),
            F.col("value").cast("string").alias("value_text"),
        )
        .withColumn("v", F.try_parse_json("value_text"))
        .withColumn("m", F.expr(object_map("v")))
    )


def validate(parsed: DataFrame) -> DataFrame:
    """Parsed messages -> ``reason``, NULL for a valid event of its topic (the key must
    be the order id; checked last, on an otherwise valid message), and the event as its
    contract's struct in a column named after its topic."""
    key_reason = F.when(
        F.coalesce(F.col("key").cast("string"), F.lit(""))
        != F.try_variant_get("v", "$.order_id", "bigint").cast("string"),
        F.lit("message key is not the order_id"),
    )
    reason = F.when(F.expr(validation_verdict()), key_reason).otherwise(
        F.coalesce(F.expr(validation_reason()), key_reason)
    )
    validated = parsed.withColumn("checks", F.expr(check_table())).withColumn("reason", reason)
    for topic, cls in SOURCE_EVENTS.items():
        validated = validated.withColumn(
            topic.value,
            F.when(
                F.col("source_topic") == topic.value, F.from_json("value_text", struct_type(cls))
            ),
        )
    return validated.drop("v", "m", "checks")


def observe_dead_letters(validated: DataFrame) -> DataFrame:
    """Count each micro-batch's dead letters by reason, reported to the driver in the
    query's progress (Spark's observed metrics: aggregated on the executors with the
    batch). Element indices are dropped from the reason (``items[3].price`` ->
    ``items[].price``), so the reasons are bounded by the contract's rule table."""
    reasons = F.collect_list(F.regexp_replace("reason", r"\[[0-9]+\]", "[]"))
    by_reason = F.map_from_entries(
        F.transform(
            F.array_distinct(reasons),
            lambda r: F.struct(r, F.size(F.filter(reasons, lambda x: x == r))),
        )
    )
    return validated.observe(DEAD_LETTER_METRICS, by_reason.alias("by_reason"))

"""The stateful join: every message as a row of a group, folded per order in Spark's
state store until the watermark passes the order's placement time plus the retention.

:func:`fold_per_order` is the job's one streaming aggregation, grouped by ``(order_id,
placed_ts, slot)``: the order (first by event time), the first time of each status, the
latest courier point, the number of events (the version) and the micro-batch that last
brought the order event. Every aggregate is commutative, so arrival order never matters.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from contract.events import OrderPlaced, OrderStatus, status_time_field
from streaming.records import OUTPUT_TYPE, coordinates, dead_letter_record
from streaming.validation import SOURCE_EVENTS, struct_type

#: How long after its placement an order's state is kept (watermark delay).
DEFAULT_RETENTION = "6 hours"


def to_slots(validated: DataFrame, output_prefix: str) -> DataFrame:
    """Each message as the row the aggregation groups by ``(order_id, placed_ts, slot)``.

    A valid event is a row of its order's state (slot ``''``); a dead letter is a slot
    of its own, whose ``out`` is the finished record. Routing both through the one
    aggregation keeps the plan a single branch, so the source is read and parsed once
    per micro-batch. An order event's lines are not rows of the state: they are written
    from the order's row in the micro-batch that brought the order event (``seen_ts``,
    that batch's timestamp; :func:`streaming.records.route`), so the state, which Spark
    scans whole for eviction every batch, keeps one row per order.
    """
    order, status, location = (F.col(t.value) for t in SOURCE_EVENTS)
    event = _slot(
        order_id=F.coalesce(order["order_id"], status["order_id"], location["order_id"]),
        placed_ts=F.timestamp_millis(
            F.coalesce(order["event_time"], status["placed_at"], location["placed_at"])
        ),
        event_time=F.coalesce(order["event_time"], status["event_time"], location["event_time"]),
        event_id=F.coalesce(order["event_id"], status["event_id"], location["event_id"]),
        kind=F.when(order.isNotNull(), "order")
        .when(status.isNotNull(), "status")
        .otherwise("location"),
        order_event=order,
        seen_ts=F.when(order.isNotNull(), F.current_timestamp()),
        status=status["status"],
        courier_id=F.coalesce(status["courier_id"], location["courier_id"]),
        lat=location["lat"],
        lon=location["lon"],
    )
    # A dead letter never moves the watermark beyond what valid events do: it takes the
    # broker's time of its message (capped at now), not a time read from the bad record;
    # a rebuild from old topics meets it at its old place, not at today's time.
    dead = _slot(
        order_id=F.lit(-1).cast("bigint"),
        placed_ts=F.col("received_ts"),
        slot=F.concat(F.lit("dead:"), coordinates()),
        out=dead_letter_record(output_prefix),
    )
    row = F.when(F.col("reason").isNotNull(), dead).otherwise(event)
    return validated.select(row.alias("w")).select("w.*")


def fold_per_order(slots: DataFrame, retention: str) -> DataFrame:
    """The join: one aggregate row per group, kept until the watermark passes ``placed_ts``."""
    kind, event_time = F.col("kind"), F.col("event_time")
    by_time = F.struct(event_time.alias("t"), F.col("event_id").alias("id"))
    first_status_times = [
        F.min(F.when((kind == "status") & (F.col("status") == s.value), event_time)).alias(
            f"raw_{status_time_field(s)}"
        )
        for s in OrderStatus
    ]
    point = F.struct("lat", "lon", event_time.alias("time"), "courier_id")
    return (
        slots.withWatermark("placed_ts", retention)
        .groupBy("order_id", "placed_ts", "slot")
        .agg(
            F.min_by("order_event", F.when(kind == "order", by_time)).alias("o"),
            F.max_by(
                "courier_id", F.when((kind == "status") & F.col("courier_id").isNotNull(), by_time)
            ).alias("status_courier"),
            F.max_by(point, F.when(kind == "location", by_time)).alias("loc"),
            F.count(F.lit(1)).alias("version"),
            F.max(event_time).alias("change_time"),
            F.max("seen_ts").alias("seen_ts"),
            F.max("out").alias("out"),
            *first_status_times,
        )
        .where(F.col("o").isNotNull() | F.col("out").isNotNull())
    )


def _slot(**columns: Column) -> Column:
    """One row of :func:`to_slots`: every column of a group's row, NULL unless given."""
    fields = {
        "order_id": F.lit(None).cast("bigint"),
        "placed_ts": F.lit(None).cast("timestamp"),
        "slot": F.lit(""),
        "event_time": F.lit(None).cast("bigint"),
        "event_id": F.lit(None).cast("string"),
        "kind": F.lit(None).cast("string"),
        "order_event": F.lit(None).cast(struct_type(OrderPlaced)),
        "seen_ts": F.lit(None).cast("timestamp"),
        "status": F.lit(None).cast("string"),
        "courier_id": F.lit(None).cast("bigint"),
        "lat": F.lit(None).cast("double"),
        "lon": F.lit(None).cast("double"),
        "out": F.lit(None).cast(OUTPUT_TYPE),
        **columns,
    }
    return F.struct(*(column.alias(name) for name, column in fields.items()))

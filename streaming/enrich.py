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
* :func:`fold_per_order` is the one streaming aggregation, grouped by ``(order_id,
  placed_ts, slot)``: it folds the three topics into one row per order (the order,
  first by event time; the first time of each status; the latest courier point; the
  number of events, the version; the micro-batch that last brought the order event).
  Every aggregate is commutative, so arrival order never matters. ``placed_ts``
  carries the watermark, so an order's state is dropped once the watermark passes its
  placement time plus the retention. Dead letters are finished records in slots of
  their own (:func:`to_slots`), so the plan is a single branch and the source is read
  and parsed once per micro-batch.
* :func:`apply_rules` decides by event time: the current status is the highest-ranked
  status reached; a cancel counts only if it came before the food left, and statuses
  after a counted cancel are ignored.
* :func:`route` gives ``orders_enriched`` for every updated order,
  ``delivery_statuses`` when the latest point was taken on the road, the order's
  ``order_items_enriched`` lines in the micro-batch that brought its order event, and
  the finished ``dead_letters`` records. Event ids are
  UUID5s of (topic, order, version or line), computed exactly as :func:`output_id`
  does, so a re-run batch writes byte-identical records.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from contract import geo
from contract.events import (
    CANCELLABLE_STATUSES,
    IN_TRANSIT_STATUSES,
    LIFECYCLE,
    SCHEMA_VERSION,
    DeadLetter,
    DeliveryStatus,
    OrderEnriched,
    OrderItemEnriched,
    OrderPlaced,
    OrderStatus,
    Topic,
    status_rank,
    status_time_field,
    topic_name,
)
from streaming.validation import (
    SOURCE_EVENTS,
    check_table,
    fields_of,
    object_map,
    struct_type,
    validation_reason,
    validation_verdict,
)

#: Namespace of the deterministic output event ids (uuid5).
OUTPUT_NAMESPACE = uuid.UUID("8f4b6a36-5d0c-4d55-9a43-2b7f0c7e8c11")

#: How long after its placement an order's state is kept (watermark delay).
DEFAULT_RETENTION = "6 hours"

#: The name of the per-batch observed metrics (``observedMetrics`` in the query progress).
DEAD_LETTER_METRICS = "dead_letters"

#: What every output row is: a record for the Kafka sink.
OUTPUT_TYPE = "struct<topic: string, key: binary, value: binary>"


def output_id(topic: Topic, order_id: int, seq: int | str) -> str:
    """The event id of an output record (what :func:`_uuid5` computes in Spark)."""
    return str(uuid.uuid5(OUTPUT_NAMESPACE, f"{topic.value}:{order_id}:{seq}"))


# ----------------------------------------------------------------------------- the steps


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
            # never ahead of now (see to_slots).
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


def to_slots(validated: DataFrame, output_prefix: str) -> DataFrame:
    """Each message as the row the aggregation groups by ``(order_id, placed_ts, slot)``.

    A valid event is a row of its order's state (slot ``''``); a dead letter is a slot
    of its own, whose ``out`` is the finished record. Routing both through the one
    aggregation keeps the plan a single branch, so the source is read and parsed once
    per micro-batch. An order event's lines are not rows of the state: they are written
    from the order's row in the micro-batch that brought the order event (``seen_ts``,
    that batch's timestamp; :func:`route`), so the state, which Spark scans whole for
    eviction every batch, keeps one row per order.
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
        slot=F.concat(F.lit("dead:"), _coordinates()),
        out=_dead_letter_record(output_prefix),
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


def apply_rules(state: DataFrame) -> DataFrame:
    """Apply the lifecycle rules to the raw status times (all by event time): the status
    times that count, the current status and its time, the distance left, and whether
    the latest point was taken on the road."""
    raw = {s: F.col(f"raw_{status_time_field(s)}") for s in OrderStatus}
    cancelled = raw[OrderStatus.CANCELLED]
    left_at = F.least(*(raw[s] for s in LIFECYCLE if s not in CANCELLABLE_STATUSES))
    cancel_counts = F.col("cancel_counts")
    ruled = state.withColumn(
        "cancel_counts",
        cancelled.isNotNull() & F.coalesce(cancelled < left_at, F.lit(True)),
    )
    # An order event is its placement, whether or not a PLACED_ORDER status came.
    reached = {
        **raw,
        OrderStatus.PLACED_ORDER: F.coalesce(raw[OrderStatus.PLACED_ORDER], F.col("o.event_time")),
    }
    for s, t in reached.items():
        if s is OrderStatus.CANCELLED:
            counted = F.when(cancel_counts, t)
        else:
            counted = F.when(cancel_counts & (t > cancelled), None).otherwise(t)
        ruled = ruled.withColumn(status_time_field(s), counted)

    status = F.col("status")
    by_rank = sorted(OrderStatus, key=status_rank, reverse=True)
    current = _case((F.col(status_time_field(s)).isNotNull(), s.value) for s in by_rank)
    status_time = _case((status == s.value, F.col(status_time_field(s))) for s in OrderStatus)
    loc = F.col("loc")
    km = _haversine_km(loc["lat"], loc["lon"], F.col("o.delivery_lat"), F.col("o.delivery_lon"))
    out_at = F.col(status_time_field(OrderStatus.OUT_FOR_DELIVERY))
    return (
        ruled.withColumn("status", current)
        .withColumn("status_time", status_time)
        .withColumn(
            "distance_left_km",
            F.when(loc.isNull(), None)
            .when(status == OrderStatus.DELIVERED.value, F.lit(0.0))
            .otherwise(F.round(km, 4)),
        )
        .withColumn(
            "on_the_road",
            status.isin([s.value for s in IN_TRANSIT_STATUSES])
            & loc.isNotNull()
            & (loc["time"] >= out_at),
        )
    )


def route(ruled: DataFrame, output_prefix: str) -> DataFrame:
    """Updated groups -> records: an order's ``orders_enriched`` (+ ``delivery_statuses``
    when on the road, + its ``order_items_enriched`` lines when this micro-batch brought
    its order event); a dead letter's finished record."""
    o = F.col("o")
    lines = F.when(
        F.col("seen_ts") == F.current_timestamp(),
        F.transform(o["items"], lambda item, i: _item_record(o, item, i + 1, output_prefix)),
    ).otherwise(F.array().cast(f"array<{OUTPUT_TYPE}>"))
    records = F.when(
        F.col("slot") == "",
        F.concat(
            F.array_compact(
                F.array(
                    _enriched_record(output_prefix),
                    F.when(F.col("on_the_road"), _delivery_record(output_prefix)),
                )
            ),
            lines,
        ),
    ).otherwise(F.array("out"))
    return ruled.select(F.explode(records).alias("out")).select("out.topic", "out.key", "out.value")


# ----------------------------------------------------------------------------- the records


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


def _record(topic: Topic, output_prefix: str, key: Column, cls: type, columns: dict) -> Column:
    """A record for the sink: ``columns`` as the contract JSON of ``cls``
    (``schema_version`` first, fields in the dataclass's order, nulls written)."""
    fields = [F.lit(SCHEMA_VERSION).alias("schema_version")]
    fields += [columns[name].alias(name) for name, _, _ in fields_of(cls)]
    value = F.to_json(F.struct(*fields), {"ignoreNullFields": "false"})
    return F.struct(
        F.lit(topic_name(topic, output_prefix)).alias("topic"),
        key.alias("key"),
        F.encode(value, "UTF-8").alias("value"),
    )


def _order_key(order_id: Column) -> Column:
    return F.encode(order_id.cast("string"), "UTF-8")


def _enriched_record(output_prefix: str) -> Column:
    """An order's ``orders_enriched`` record, from its folded and ruled state."""
    o, loc, order_id, version = F.col("o"), F.col("loc"), F.col("order_id"), F.col("version")
    columns = {
        "event_id": _uuid5(Topic.ORDERS_ENRICHED, order_id, version),
        "event_time": F.col("change_time"),
        "order_id": order_id,
        "version": version,
        "items": o["items"],
        "item_count": F.aggregate(
            o["items"], F.lit(0).cast("bigint"), lambda acc, x: acc + x["quantity"]
        ),
        "total": o["total"].cast("double"),
        "status": F.col("status"),
        "status_time": F.col("status_time"),
        "created_at": o["event_time"],
        "courier_id": F.coalesce("status_courier", loc["courier_id"]),
        "courier_lat": loc["lat"],
        "courier_lon": loc["lon"],
        "location_time": loc["time"],
        "distance_left_km": F.col("distance_left_km"),
    }
    for name in (
        "customer_id", "customer_name", "restaurant_id", "restaurant_name", "restaurant_lat",
        "restaurant_lon", "delivery_lat", "delivery_lon",
    ):  # fmt: skip
        columns[name] = o[name]
    for s in OrderStatus:
        columns[status_time_field(s)] = F.col(status_time_field(s))
    return _record(
        Topic.ORDERS_ENRICHED, output_prefix, _order_key(order_id), OrderEnriched, columns
    )


def _delivery_record(output_prefix: str) -> Column:
    """An order's ``delivery_statuses`` record: its latest point, taken on the road."""
    o, loc, order_id, version = F.col("o"), F.col("loc"), F.col("order_id"), F.col("version")
    columns = {
        "event_id": _uuid5(Topic.DELIVERY_STATUSES, order_id, version),
        "event_time": loc["time"],
        "order_id": order_id,
        "version": version,
        "customer_id": o["customer_id"],
        "restaurant_id": o["restaurant_id"],
        "courier_id": loc["courier_id"],
        "status": F.col("status"),
        "lat": loc["lat"],
        "lon": loc["lon"],
        "destination_lat": o["delivery_lat"],
        "destination_lon": o["delivery_lon"],
        "distance_left_km": F.col("distance_left_km"),
    }
    return _record(
        Topic.DELIVERY_STATUSES, output_prefix, _order_key(order_id), DeliveryStatus, columns
    )


def _item_record(order: Column, item: Column, line: Column, output_prefix: str) -> Column:
    """The ``order_items_enriched`` record of one line (numbered from 1) of an order event."""
    price = item["unit_price"].cast("double")
    columns = {
        "event_id": _uuid5(Topic.ORDER_ITEMS_ENRICHED, order["order_id"], line),
        "event_time": order["event_time"],
        "order_id": order["order_id"],
        "line": line.cast("bigint"),
        "customer_id": order["customer_id"],
        "restaurant_id": order["restaurant_id"],
        "restaurant_name": order["restaurant_name"],
        "product_id": item["product_id"],
        "product_name": item["name"],
        "category": item["category"],
        "quantity": item["quantity"],
        "unit_price": price,
        "line_total": F.round(price * item["quantity"], 2),
    }
    key = _order_key(order["order_id"])
    return _record(Topic.ORDER_ITEMS_ENRICHED, output_prefix, key, OrderItemEnriched, columns)


def _coordinates() -> Column:
    """``<topic>:<partition>:<offset>``: where a message was, which names its dead letter."""
    return F.concat("source_topic", F.lit(":"), "partition", F.lit(":"), "offset")


def _dead_letter_record(output_prefix: str) -> Column:
    """The ``dead_letters`` record of an invalid message (id: UUID5 of its coordinates)."""
    columns = {
        "event_id": _uuid5(Topic.DEAD_LETTERS, _coordinates()),
        "event_time": F.unix_millis(F.current_timestamp()),
        "source_topic": F.col("source_topic"),
        "source_partition": F.col("partition").cast("bigint"),
        "source_offset": F.col("offset"),
        "reason": F.col("reason"),
        # base64() wraps lines MIME-style unless spark.sql.chunkBase64String.enabled is off.
        "key_b64": F.regexp_replace(F.base64("key"), r"[\r\n]", ""),
        "value_b64": F.coalesce(F.regexp_replace(F.base64("value"), r"[\r\n]", ""), F.lit("")),
    }
    return _record(Topic.DEAD_LETTERS, output_prefix, F.col("key"), DeadLetter, columns)


# ----------------------------------------------------------------------------- expressions


def _uuid5(topic: Topic, *parts: Column) -> Column:
    """``uuid.uuid5(OUTPUT_NAMESPACE, "<topic>:<part>:...")``, as :func:`output_id`."""
    name = [F.lit(f"{topic.value}:")]
    for i, part in enumerate(parts):
        name += [F.lit(":"), part] if i else [part]
    h = F.sha1(F.concat(F.unhex(F.lit(OUTPUT_NAMESPACE.hex)), F.encode(F.concat(*name), "UTF-8")))
    # RFC 4122: version 5 in the 13th hex digit, the variant's two bits in the 17th.
    variant = F.lower(F.hex(F.conv(h.substr(17, 1), 16, 10).cast("int").bitwiseAND(3).bitwiseOR(8)))
    return F.concat_ws(
        "-",
        h.substr(1, 8),
        h.substr(9, 4),
        F.concat(F.lit("5"), h.substr(14, 3)),
        F.concat(variant, h.substr(18, 3)),
        h.substr(21, 12),
    )


def _haversine_km(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Spark's twin of :func:`contract.geo.haversine_km` (same operations, same order)."""
    a = F.pow(F.sin((F.radians(lat2) - F.radians(lat1)) / 2), 2) + F.cos(F.radians(lat1)) * F.cos(
        F.radians(lat2)
    ) * F.pow(F.sin(F.radians(lon2 - lon1) / 2), 2)
    return 2 * geo.EARTH_RADIUS_KM * F.asin(F.least(F.lit(1.0), F.sqrt(a)))


def _case(branches: Iterable[tuple[Column, Any]]) -> Column:
    """``CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... END``: NULL when no condition holds."""
    (condition, value), *rest = branches
    case = F.when(condition, value)
    for condition, value in rest:
        case = case.when(condition, value)
    return case

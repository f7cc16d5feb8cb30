"""The order join as Spark operators: parse, validate, join by order, route.

:func:`outputs` turns a DataFrame with the Kafka source's columns (key, value,
topic, partition, offset, timestamp) into ``(topic, key, value)`` rows to produce.
It is the same on a streaming DataFrame (the job) and a static one (the fast
tests), and every step is a JVM operator: no Python UDF, no driver-side rows.

* **Parse and validate.** ``try_parse_json`` gives each value a VARIANT, whose
  per-field JSON types the checks read; the checks, their order and the Spark
  schemas come from the contract's rule table (:mod:`streaming.validation`), so a
  field added there is parsed and validated here. A message that fails goes to
  ``dead_letters`` with ``invalid <field>: <reason>``, as ``parse_event`` names it.
* **Join.** One streaming aggregation grouped by ``(order_id, placed_at)``
  folds the three topics into one row per order: the order (first by event
  time), the first time of each status, the latest courier point, the number of
  events (the version). Every aggregate is commutative, so arrival order never
  matters. ``placed_at`` carries the watermark, so an order's state is dropped
  once the watermark passes its placement time plus the retention.
* **Rules, decided by event time.** The current status is the highest-ranked
  status reached; a cancel counts only if it came before the food left (a
  later one is ignored), and statuses after a counted cancel are ignored.
* **Outputs.** ``orders_enriched`` for every updated order, ``delivery_statuses``
  when the latest point was taken on the road, ``order_items_enriched`` per
  line of each order event, ``dead_letters`` for what failed validation. Event
  ids are UUID5s of (topic, order, version or line), computed in SQL exactly as
  :func:`output_id` does, so a re-run batch writes byte-identical records.
"""

from __future__ import annotations

import uuid
from typing import Any

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
    sql_literal,
    struct_type,
    validation_reason,
    validation_verdict,
)

#: Namespace of the deterministic output event ids (uuid5).
OUTPUT_NAMESPACE = uuid.UUID("8f4b6a36-5d0c-4d55-9a43-2b7f0c7e8c11")

#: How long after its placement an order's state is kept (watermark delay).
DEFAULT_RETENTION = "6 hours"


def output_id(topic: Topic, order_id: int, seq: int | str) -> str:
    """The event id of an output record (what :func:`_sql_uuid5` computes in SQL)."""
    return str(uuid.uuid5(OUTPUT_NAMESPACE, f"{topic.value}:{order_id}:{seq}"))


# ----------------------------------------------------------------------------- SQL helpers


def _sql_uuid5(name_sql: str) -> str:
    """SQL computing ``uuid.uuid5(OUTPUT_NAMESPACE, name)`` for a string expression."""
    h = f"sha1(concat(unhex('{OUTPUT_NAMESPACE.hex}'), encode({name_sql}, 'UTF-8')))"
    variant = f"lower(conv(cast((cast(conv(substr({h}, 17, 1), 16, 10) AS INT) & 3) | 8 AS STRING), 10, 16))"
    return (
        f"concat_ws('-', substr({h}, 1, 8), substr({h}, 9, 4), concat('5', substr({h}, 14, 3)), "
        f"concat({variant}, substr({h}, 18, 3)), substr({h}, 21, 12))"
    )


def _json_record(cls: type, columns: dict[str, str]) -> str:
    """SQL: the contract JSON of ``cls`` (``schema_version`` first, fields in order)."""
    parts = [f"'schema_version', {SCHEMA_VERSION}"]
    for name, _, _ in fields_of(cls):
        parts.append(f"'{name}', {columns[name]}")
    return f"to_json(named_struct({', '.join(parts)}), map('ignoreNullFields', 'false'))"


def _haversine_km(lat1: str, lon1: str, lat2: str, lon2: str) -> str:
    """SQL twin of :func:`contract.geo.haversine_km`."""
    a = (
        f"pow(sin((radians({lat2}) - radians({lat1})) / 2), 2) + cos(radians({lat1})) * "
        f"cos(radians({lat2})) * pow(sin(radians({lon2} - {lon1}) / 2), 2)"
    )
    return f"(2 * {geo.EARTH_RADIUS_KM} * asin(least(1.0D, sqrt({a}))))"


# ----------------------------------------------------------------------------- the plan


def parse(source: Any, input_prefix: str = "") -> Any:
    """Source rows -> one row per message: its logical topic, a reason (or NULL) and fields."""
    from pyspark.sql import functions as F

    start = len(input_prefix) + 1
    df = (
        source.selectExpr(
            "key",
            "value",
            f"substr(topic, {start}) AS source_topic",
            "partition",
            "offset",
            # A dead letter's place in the watermark: when the broker took the message,
            # never ahead of now (see _work).
            "least(coalesce(timestamp, current_timestamp()), current_timestamp()) AS received_ts",
            "cast(value AS STRING) AS value_text",
        )
        .withColumn("v", F.expr("try_parse_json(value_text)"))
        .withColumn("m", F.expr(object_map("v")))
        .withColumn("checks", F.expr(check_table()))
    )
    # The key must be the order id; checked last, on an otherwise valid message.
    key_reason = (
        "CASE WHEN coalesce(cast(key AS STRING), '') "
        "!= cast(try_variant_get(v, '$.order_id', 'bigint') AS STRING) "
        "THEN 'message key is not the order_id' END"
    )
    reason = (
        f"CASE WHEN {validation_verdict()} THEN {key_reason} "
        f"ELSE coalesce({validation_reason()}, {key_reason}) END"
    )
    df = df.withColumn("reason", F.expr(reason))
    for topic, cls in SOURCE_EVENTS.items():
        df = df.withColumn(
            topic.value,
            F.when(
                F.col("source_topic") == topic.value, F.from_json("value_text", struct_type(cls))
            ),
        )
    return df.drop("v", "m", "checks")


OUTPUT_TYPE = "struct<topic: string, key: binary, value: binary>"


def _work(parsed: Any, output_prefix: str) -> Any:
    """Each message as the rows the aggregation groups by ``(order_id, placed_ts, slot)``.

    A valid event is one row of its order's state (slot ``''``); each line of an
    order event and each dead letter is a row of its own slot, whose ``out`` is the
    finished record. Routing everything through the one aggregation keeps the plan
    a single branch, so the source is read and parsed once per micro-batch.
    """
    o, s, d = (t.value for t in SOURCE_EVENTS)
    order_type = struct_type(OrderPlaced).simpleString()

    def row(**cols: str) -> str:
        fields = {
            "order_id": "CAST(NULL AS BIGINT)",
            "placed_ts": "CAST(NULL AS TIMESTAMP)",
            "slot": "''",
            "event_time": "CAST(NULL AS BIGINT)",
            "event_id": "CAST(NULL AS STRING)",
            "kind": "CAST(NULL AS STRING)",
            "order_event": f"CAST(NULL AS {order_type})",
            "status": "CAST(NULL AS STRING)",
            "courier_id": "CAST(NULL AS BIGINT)",
            "lat": "CAST(NULL AS DOUBLE)",
            "lon": "CAST(NULL AS DOUBLE)",
            "out": f"CAST(NULL AS {OUTPUT_TYPE})",
            **cols,
        }
        return "named_struct(" + ", ".join(f"'{k}', {v}" for k, v in fields.items()) + ")"

    event = row(
        order_id=f"coalesce({o}.order_id, {s}.order_id, {d}.order_id)",
        placed_ts=f"timestamp_millis(coalesce({o}.event_time, {s}.placed_at, {d}.placed_at))",
        event_time=f"coalesce({o}.event_time, {s}.event_time, {d}.event_time)",
        event_id=f"coalesce({o}.event_id, {s}.event_id, {d}.event_id)",
        kind=f"CASE WHEN {o} IS NOT NULL THEN 'order' WHEN {s} IS NOT NULL THEN 'status' "
        "ELSE 'location' END",
        order_event=o,
        status=f"{s}.status",
        courier_id=f"coalesce({s}.courier_id, {d}.courier_id)",
        lat=f"{d}.lat",
        lon=f"{d}.lon",
    )
    # A dead letter never moves the watermark beyond what valid events do: it takes the
    # broker's time of its message (capped at now), not a time read from the bad record;
    # a rebuild from old topics meets it at its old place, not at today's time.
    dead = row(
        order_id="-1L",
        placed_ts="received_ts",
        slot="'dead:' || source_topic || ':' || partition || ':' || offset",
        out=_dead_letter_output(output_prefix),
    )
    line = row(
        order_id=f"{o}.order_id",
        placed_ts=f"timestamp_millis({o}.event_time)",
        slot="'line:' || (i + 1)",
        out=_item_output(output_prefix),
    )
    work = (
        f"CASE WHEN reason IS NOT NULL THEN array({dead}) "
        f"WHEN {o} IS NOT NULL THEN concat(array({event}), transform({o}.items, (item, i) -> {line})) "
        f"ELSE array({event}) END"
    )
    return parsed.selectExpr(f"explode({work}) AS w").select("w.*")


def _state(work: Any, retention: str) -> Any:
    """The join: one aggregate row per group, kept until the watermark passes ``placed_ts``."""
    from pyspark.sql import functions as F

    aggs = [
        F.expr(
            "min_by(order_event, CASE WHEN kind = 'order' "
            "THEN named_struct('t', event_time, 'id', event_id) END)"
        ).alias("o"),
        F.expr(
            "max_by(courier_id, CASE WHEN kind = 'status' AND courier_id IS NOT NULL "
            "THEN named_struct('t', event_time, 'id', event_id) END)"
        ).alias("status_courier"),
        F.expr(
            "max_by(named_struct('lat', lat, 'lon', lon, 'time', event_time, "
            "'courier_id', courier_id), CASE WHEN kind = 'location' "
            "THEN named_struct('t', event_time, 'id', event_id) END)"
        ).alias("loc"),
        F.count(F.lit(1)).alias("version"),
        F.max("event_time").alias("change_time"),
        F.max("out").alias("out"),
    ]
    for s in OrderStatus:
        aggs.append(
            F.expr(
                f"min(CASE WHEN kind = 'status' AND status = '{s.value}' THEN event_time END)"
            ).alias(f"raw_{status_time_field(s)}")
        )
    return (
        work.withWatermark("placed_ts", retention)
        .groupBy("order_id", "placed_ts", "slot")
        .agg(*aggs)
        .where("o IS NOT NULL OR out IS NOT NULL")
    )


def _status_columns(state: Any) -> Any:
    """Apply the lifecycle rules to the raw status times (all by event time)."""
    from pyspark.sql import functions as F

    raw = {s: f"raw_{status_time_field(s)}" for s in OrderStatus}
    placed = f"coalesce({raw[OrderStatus.PLACED_ORDER]}, o.event_time)"
    left_at = "least(" + ", ".join(raw[s] for s in LIFECYCLE if s not in CANCELLABLE_STATUSES) + ")"
    cancelled = raw[OrderStatus.CANCELLED]
    df = state.withColumn(
        "cancel_counts",
        F.expr(f"{cancelled} IS NOT NULL AND coalesce({cancelled} < {left_at}, true)"),
    )
    for s in OrderStatus:
        t = placed if s is OrderStatus.PLACED_ORDER else raw[s]
        if s is OrderStatus.CANCELLED:
            expr = f"CASE WHEN cancel_counts THEN {t} END"
        else:
            expr = f"CASE WHEN cancel_counts AND {t} > {cancelled} THEN NULL ELSE {t} END"
        df = df.withColumn(status_time_field(s), F.expr(expr))
    by_rank = sorted(OrderStatus, key=status_rank, reverse=True)
    current = (
        "CASE "
        + " ".join(f"WHEN {status_time_field(s)} IS NOT NULL THEN '{s.value}'" for s in by_rank)
        + " END"
    )
    status_time = (
        "CASE "
        + " ".join(f"WHEN status = '{s.value}' THEN {status_time_field(s)}" for s in OrderStatus)
        + " END"
    )
    in_transit = ", ".join(f"'{s.value}'" for s in IN_TRANSIT_STATUSES)
    out_at = status_time_field(OrderStatus.OUT_FOR_DELIVERY)
    km = _haversine_km("loc.lat", "loc.lon", "o.delivery_lat", "o.delivery_lon")
    return (
        df.withColumn("status", F.expr(current))
        .withColumn("status_time", F.expr(status_time))
        .withColumn(
            "distance_left_km",
            F.expr(
                f"CASE WHEN loc IS NULL THEN NULL WHEN status = 'DELIVERED' THEN 0.0D "
                f"ELSE round({km}, 4) END"
            ),
        )
        .withColumn(
            "on_the_road",
            F.expr(f"status IN ({in_transit}) AND loc IS NOT NULL AND loc.time >= {out_at}"),
        )
    )


def _outputs_of(state: Any, output_prefix: str) -> Any:
    """Updated groups -> records: an order's ``orders_enriched`` (+ ``delivery_statuses``
    when on the road); a line's or a dead letter's finished record."""
    df = _status_columns(state)
    enriched = {
        "event_id": _sql_uuid5(f"'{Topic.ORDERS_ENRICHED.value}:' || order_id || ':' || version"),
        "event_time": "change_time",
        "order_id": "order_id",
        "version": "version",
        "items": "o.items",
        "item_count": "aggregate(o.items, 0L, (acc, x) -> acc + x.quantity)",
        "total": "CAST(o.total AS DOUBLE)",
        "status": "status",
        "status_time": "status_time",
        "created_at": "o.event_time",
        "courier_id": "coalesce(status_courier, loc.courier_id)",
        "courier_lat": "loc.lat",
        "courier_lon": "loc.lon",
        "location_time": "loc.time",
        "distance_left_km": "distance_left_km",
    }
    for name in (
        "customer_id", "customer_name", "restaurant_id", "restaurant_name", "restaurant_lat",
        "restaurant_lon", "delivery_lat", "delivery_lon",
    ):  # fmt: skip
        enriched[name] = f"o.{name}"
    for s in OrderStatus:
        enriched[status_time_field(s)] = status_time_field(s)
    delivery = {
        "event_id": _sql_uuid5(f"'{Topic.DELIVERY_STATUSES.value}:' || order_id || ':' || version"),
        "event_time": "loc.time",
        "order_id": "order_id",
        "version": "version",
        "customer_id": "o.customer_id",
        "restaurant_id": "o.restaurant_id",
        "courier_id": "loc.courier_id",
        "status": "status",
        "lat": "loc.lat",
        "lon": "loc.lon",
        "destination_lat": "o.delivery_lat",
        "destination_lon": "o.delivery_lon",
        "distance_left_km": "distance_left_km",
    }
    key = "encode(cast(order_id AS STRING), 'UTF-8')"
    enriched_out = (
        f"named_struct('topic', {sql_literal(topic_name(Topic.ORDERS_ENRICHED, output_prefix))}, "
        f"'key', {key}, 'value', encode({_json_record(OrderEnriched, enriched)}, 'UTF-8'))"
    )
    delivery_out = (
        f"CASE WHEN on_the_road THEN named_struct('topic', "
        f"{sql_literal(topic_name(Topic.DELIVERY_STATUSES, output_prefix))}, 'key', {key}, "
        f"'value', encode({_json_record(DeliveryStatus, delivery)}, 'UTF-8')) END"
    )
    return df.selectExpr(
        f"explode(CASE WHEN slot = '' THEN array_compact(array({enriched_out}, {delivery_out})) "
        "ELSE array(out) END) AS out"
    ).selectExpr("out.topic AS topic", "out.key AS key", "out.value AS value")


def _item_output(output_prefix: str) -> str:
    """SQL over ``orders`` and lambda variables ``item``, ``i``: one line's record."""
    o = Topic.ORDERS.value
    columns = {
        "event_id": _sql_uuid5(
            f"'{Topic.ORDER_ITEMS_ENRICHED.value}:' || {o}.order_id || ':' || (i + 1)"
        ),
        "event_time": f"{o}.event_time",
        "order_id": f"{o}.order_id",
        "line": "CAST(i + 1 AS BIGINT)",
        "customer_id": f"{o}.customer_id",
        "restaurant_id": f"{o}.restaurant_id",
        "restaurant_name": f"{o}.restaurant_name",
        "product_id": "item.product_id",
        "product_name": "item.name",
        "category": "item.category",
        "quantity": "item.quantity",
        "unit_price": "CAST(item.unit_price AS DOUBLE)",
        "line_total": "round(CAST(item.unit_price AS DOUBLE) * item.quantity, 2)",
    }
    return (
        f"named_struct('topic', {sql_literal(topic_name(Topic.ORDER_ITEMS_ENRICHED, output_prefix))}, "
        f"'key', encode(cast({o}.order_id AS STRING), 'UTF-8'), "
        f"'value', encode({_json_record(OrderItemEnriched, columns)}, 'UTF-8'))"
    )


def _dead_letter_output(output_prefix: str) -> str:
    """SQL: the ``dead_letters`` record of an invalid message (id: UUID5 of its coordinates)."""
    columns = {
        "event_id": _sql_uuid5(
            f"'{Topic.DEAD_LETTERS.value}:' || source_topic || ':' || partition || ':' || offset"
        ),
        "event_time": "unix_millis(current_timestamp())",
        "source_topic": "source_topic",
        "source_partition": "CAST(partition AS BIGINT)",
        "source_offset": "offset",
        "reason": "reason",
        # base64() wraps lines MIME-style unless spark.sql.chunkBase64String.enabled is off.
        "key_b64": "regexp_replace(base64(key), '[\\r\\n]', '')",
        "value_b64": "coalesce(regexp_replace(base64(value), '[\\r\\n]', ''), '')",
    }
    return (
        f"named_struct('topic', {sql_literal(topic_name(Topic.DEAD_LETTERS, output_prefix))}, "
        f"'key', key, 'value', encode({_json_record(DeadLetter, columns)}, 'UTF-8'))"
    )


#: The name of the per-batch observed metrics (``observedMetrics`` in the query progress).
DEAD_LETTER_METRICS = "dead_letters"


def observe_dead_letters(parsed: Any) -> Any:
    """Count each micro-batch's dead letters by reason, reported to the driver in the
    query's progress (Spark's observed metrics: aggregated on the executors with the
    batch). Element indices are dropped from the reason (``items[3].price`` ->
    ``items[].price``), so the reasons are bounded by the contract's rule table."""
    from pyspark.sql import functions as F

    reasons = "collect_list(regexp_replace(reason, '\\\\[[0-9]+\\\\]', '[]'))"
    by_reason = (
        f"map_from_entries(transform(array_distinct({reasons}), "
        f"r -> struct(r, size(filter({reasons}, x -> x = r)))))"
    )
    return parsed.observe(DEAD_LETTER_METRICS, F.expr(by_reason).alias("by_reason"))


def outputs(
    source: Any,
    *,
    input_prefix: str = "",
    output_prefix: str = "",
    retention: str = DEFAULT_RETENTION,
) -> Any:
    """Every record the job produces for ``source``: columns topic, key, value."""
    work = _work(observe_dead_letters(parse(source, input_prefix)), output_prefix)
    return _outputs_of(_state(work, retention), output_prefix)

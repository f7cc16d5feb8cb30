"""The output records: which ones an updated group writes, and each one's contract JSON.

Every record is a ``(topic, key, value)`` struct for Kafka's sink, its value the
contract JSON of its event (:mod:`contract.events`). Event ids are UUID5s of (topic,
order, version or line), computed in Spark exactly as :func:`output_id` does in Python,
so a re-run batch writes byte-identical records.
"""

from __future__ import annotations

import uuid

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from contract.events import (
    SCHEMA_VERSION,
    DeadLetter,
    DeliveryStatus,
    OrderEnriched,
    OrderItemEnriched,
    OrderStatus,
    Topic,
    status_time_field,
    topic_name,
)
from streaming.validation import fields_of

#: Namespace of the deterministic output event ids (uuid5).
OUTPUT_NAMESPACE = uuid.UUID("8f4b6a36-5d0c-4d55-9a43-2b7f0c7e8c11")

#: What every output row is: a record for the Kafka sink.
OUTPUT_TYPE = "struct<topic: string, key: binary, value: binary>"


def output_id(topic: Topic, order_id: int, seq: int | str) -> str:
    """The event id of an output record (what :func:`_uuid5` computes in Spark)."""
    return str(uuid.uuid5(OUTPUT_NAMESPACE, f"{topic.value}:{order_id}:{seq}"))


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


def coordinates() -> Column:
    """``<topic>:<partition>:<offset>``: where a message was, which names its dead letter."""
    return F.concat("source_topic", F.lit(":"), "partition", F.lit(":"), "offset")


def dead_letter_record(output_prefix: str) -> Column:
    """The ``dead_letters`` record of an invalid message (id: UUID5 of its coordinates)."""
    columns = {
        "event_id": _uuid5(Topic.DEAD_LETTERS, coordinates()),
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

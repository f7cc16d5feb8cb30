"""The topics of the contract: their logical names and the physical ones a deployment
uses (``KAFKA_TOPIC_PREFIX``), so that several systems can share one cluster."""

from __future__ import annotations

import os
from enum import StrEnum


class Topic(StrEnum):
    """Logical topic names; :func:`topic_name` adds the deployment's prefix."""

    ORDERS = "orders"
    ORDER_STATUSES = "order_statuses"
    DELIVERY_LOCATIONS = "delivery_locations"
    ORDERS_ENRICHED = "orders_enriched"
    DELIVERY_STATUSES = "delivery_statuses"
    ORDER_ITEMS_ENRICHED = "order_items_enriched"
    DEAD_LETTERS = "dead_letters"


SOURCE_TOPICS = (Topic.ORDERS, Topic.ORDER_STATUSES, Topic.DELIVERY_LOCATIONS)
ENRICHED_TOPICS = (Topic.ORDERS_ENRICHED, Topic.DELIVERY_STATUSES, Topic.ORDER_ITEMS_ENRICHED)


def topic_name(topic: Topic | str, prefix: str | None = None) -> str:
    """The physical topic name: ``KAFKA_TOPIC_PREFIX`` + logical name."""
    if prefix is None:
        prefix = os.environ.get("KAFKA_TOPIC_PREFIX", "")
    return f"{prefix}{topic}"  # a StrEnum formats as its value

"""The stream job's metrics, read on the driver from each micro-batch's query progress.

Spark already measures every batch (rows, rates, durations, state, the offsets each
source reached and the newest it could read) and the job's observed metrics count
the dead letters on the executors; the driver only copies them into
prometheus-client, served on ``STREAMING_METRICS_PORT`` (:mod:`runtime.metrics`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from .enrich import DEAD_LETTER_METRICS

INPUT_RATE = Gauge(
    "ordertrack_stream_input_rows_per_second", "Rows per second arriving, last micro-batch"
)
PROCESSED_RATE = Gauge(
    "ordertrack_stream_processed_rows_per_second", "Rows per second processed, last micro-batch"
)
BATCH_DURATION = Histogram(
    "ordertrack_stream_batch_duration_seconds",
    "Duration of each micro-batch that read rows (trigger execution)",
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)
INPUT_ROWS = Counter("ordertrack_stream_input_rows", "Rows read from the source topics")
BEHIND = Gauge(
    "ordertrack_stream_records_behind",
    "Records in each source topic past what the last micro-batch read",
    ["topic"],
)
STATE_ROWS = Gauge("ordertrack_stream_state_rows", "Rows in the join state (orders kept)")
STATE_EVICTION = Gauge(
    "ordertrack_stream_state_eviction_seconds",
    "Time the last micro-batch spent scanning the whole join state for rows past the "
    "watermark (summed over its partitions; grows with the state, not the batch)",
)
DEAD_LETTERS = Counter(
    "ordertrack_stream_dead_letters", "Records refused to dead_letters, by reason", ["reason"]
)
LAST_BATCH = Gauge(
    "ordertrack_stream_last_batch_timestamp_seconds", "When the last micro-batch completed"
)


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    """A source's offsets as topic -> partition -> offset (both connectors' shapes)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {
        topic: {str(p): int(o) for p, o in parts.items() if isinstance(o, int)}
        for topic, parts in value.items()
        if isinstance(parts, dict) and not topic.startswith("_")
    }


def records_behind(progress: dict[str, Any]) -> dict[str, int]:
    """Per source topic, the records between the batch's end and the newest offsets."""
    behind: dict[str, int] = {}
    for source in progress.get("sources") or []:
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        for topic, parts in latest.items():
            done = end.get(topic, {})
            behind[topic] = behind.get(topic, 0) + sum(
                max(0, offset - done.get(p, 0)) for p, offset in parts.items()
            )
    return behind


def record(progress: dict[str, Any]) -> None:
    """Copy one micro-batch's progress into the metrics."""
    INPUT_RATE.set(progress.get("inputRowsPerSecond") or 0.0)
    PROCESSED_RATE.set(progress.get("processedRowsPerSecond") or 0.0)
    rows = progress.get("numInputRows") or 0
    if rows:
        INPUT_ROWS.inc(rows)
        BATCH_DURATION.observe((progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000)
    for topic, count in records_behind(progress).items():
        BEHIND.labels(topic).set(count)
    operators = progress.get("stateOperators") or []
    STATE_ROWS.set(sum(op.get("numRowsTotal") or 0 for op in operators))
    STATE_EVICTION.set(sum(op.get("allRemovalsTimeMs") or 0 for op in operators) / 1000)
    observed = (progress.get("observedMetrics") or {}).get(DEAD_LETTER_METRICS)
    if hasattr(observed, "asDict"):  # a Row in PySpark's progress objects
        observed = observed.asDict()
    for reason, count in ((observed or {}).get("by_reason") or {}).items():
        DEAD_LETTERS.labels(reason).inc(count)
    LAST_BATCH.set(time.time())

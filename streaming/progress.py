"""What the driver does with each micro-batch's progress: metrics, a log line, the
source positions pipeline health reads, and the ready line the supervisor waits for."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from typing import Any

from runtime.conf import kafka_config
from runtime.offsets import OffsetReporter

from . import metrics
from .settings import Settings

log = logging.getLogger("streaming")

READY_LINE = "streaming: ready"


def follow(query: Any, settings: Settings, stop: threading.Event) -> bool:
    """Hand each batch's progress, once, to the metrics, the log and the position
    reporter until ``stop`` is set or the query ends; print :data:`READY_LINE` after
    the first. Returns whether any batch completed."""
    last_batch = -1
    ready = False
    reporter = OffsetReporter(
        "stream", replace(kafka_config(), bootstrap_servers=settings.bootstrap_servers)
    )

    def drain(progresses: list[Any]) -> None:
        nonlocal last_batch, ready
        for progress in progresses:
            if progress["batchId"] <= last_batch:
                continue
            last_batch = progress["batchId"]
            try:
                metrics.record(progress)
            except Exception:  # noqa: BLE001 - metrics must never stop the job
                log.exception("streaming: could not record batch %s's metrics", last_batch)
            if progress["numInputRows"]:
                log.info("%s", progress_line(progress))
            reporter.report(source_positions(progress))
            if not ready:
                ready = True
                print(READY_LINE, flush=True)

    # Each look is a few calls into the JVM and one progress serialised to JSON; the
    # last 100 batches' (recentProgress) are read only when a batch was missed, since
    # reading them costs a hundred of each.
    recent = settings.progress == "recent"
    poll_seconds = 1.0 if recent else 0.25
    try:
        while not stop.is_set() and query.isActive:
            last = query.lastProgress
            if last is not None and last["batchId"] > last_batch:
                missed = last_batch >= 0 and last["batchId"] > last_batch + 1
                if recent or missed:
                    drain(query.recentProgress)
                else:
                    drain([last])
            stop.wait(poll_seconds)
        drain(query.recentProgress)
    finally:
        reporter.close()
    return ready


def progress_line(progress: dict[str, Any]) -> str:
    """One log line per micro-batch: rows, where the time went, state size."""
    durations = progress.get("durationMs") or {}
    parts = [
        f"batch={progress['batchId']}",
        f"rows={progress['numInputRows']}",
        f"duration_ms={durations.get('triggerExecution', 0)}",
        f"add_batch_ms={durations.get('addBatch', 0)}",
        f"latest_offset_ms={durations.get('latestOffset', 0)}",
        f"planning_ms={durations.get('queryPlanning', 0)}",
        f"wal_ms={durations.get('walCommit', 0)}",
        f"commit_ms={durations.get('commitOffsets', 0)}",
    ]
    for op in progress.get("stateOperators") or []:
        parts += [
            f"state_rows={op.get('numRowsTotal')}",
            f"state_updated={op.get('numRowsUpdated')}",
            f"state_dropped_late={op.get('numRowsDroppedByWatermark')}",
            f"state_commit_ms={op.get('commitTimeMs')}",
            # Each batch, Spark scans the whole state for keys past the watermark: this
            # grows with the orders kept (STREAMING_ORDER_RETENTION), not with the batch.
            f"state_evict_ms={op.get('allRemovalsTimeMs')}",
        ]
    return "streaming: " + " ".join(parts)


def source_positions(progress: dict[str, Any]) -> dict[str, dict[int, int]]:
    """The next offset of each source partition after this batch (its ``endOffset``):
    topic -> partition -> offset. Spark's Kafka source commits nothing to Kafka, so this
    is what pipeline health learns the job's position from (:mod:`runtime.offsets`)."""
    out: dict[str, dict[int, int]] = {}
    for source in progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if not isinstance(end, dict):
            continue
        for topic, parts in end.items():
            if isinstance(parts, dict):
                out[topic] = {int(p): int(o) for p, o in parts.items()}
    return out

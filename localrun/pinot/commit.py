"""Commit Pinot's consuming segments before a graceful stop, so a restart loses no row.

A REALTIME table holds its newest rows in consuming segments, in the server's memory
only: a restarted server rebuilds them by consuming Kafka again from each segment's start
offset. ``make run``'s Kafka keeps at most 256 MiB per partition (runtime/conf.py), which
the enriched topics fill in minutes at the default load, so a consuming segment (flushed
after 6 h or ~100 MB) soon outlives its start offset; a restart then resumes at the first
offset Kafka still has, and every order whose newest record was in between is gone from
Pinot. A committed segment is a file the controller keeps under the data folder, which a
restart loads as it is: :func:`commit_consuming` commits them first (docs/pinot.md).

The calls, all in Pinot 0.11.0's controller (read from its jar's REST resources):
``GET /tables/{table}/idealstate`` (which segments consume), ``POST
/tables/{table}/forceCommit`` (asynchronous: the servers finish every consuming segment of
the table through the completion protocol and start new ones at the committed end), and
``GET /segments/{table}/{segment}/metadata`` (the segment's ZooKeeper record, whose
``segment.realtime.status`` goes from IN_PROGRESS to DONE once the controller holds it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from pinot.deployment import LoaderError
from pinot.loader import Controller

#: The ZooKeeper statuses of a segment the controller holds (Pinot's ``Status.isCompleted``).
COMPLETED = frozenset({"DONE", "UPLOADED"})
STATUS = "segment.realtime.status"


class CommitError(RuntimeError):
    """Pinot's answer does not say what the commit needs to know."""


@dataclass
class CommitReport:
    """What a commit did with each table, and what was still not committed at the end."""

    #: table -> the consuming segments it committed
    committed: dict[str, list[str]] = field(default_factory=dict)
    #: table -> why nothing was committed, with nothing at stake
    skipped: dict[str, str] = field(default_factory=dict)
    #: table -> why it could not be asked
    failed: dict[str, str] = field(default_factory=dict)
    #: segment -> its status when the time was up (asked, not committed in time)
    pending: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def consuming_segments(ideal_state: dict[str, dict[str, str]] | None) -> list[str]:
    """The segments of an ideal state (segment -> instance -> state) that some server
    is to consume."""
    return sorted(
        segment
        for segment, replicas in (ideal_state or {}).items()
        if "CONSUMING" in (replicas or {}).values()
    )


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def count_sql(table: str, segments: Iterable[str]) -> str:
    """Rows indexed per segment (every row, not only the newest per key: ``skipUpsert``).
    ``$segmentName`` is Pinot's built-in virtual column, a constant per segment, so the
    filter skips the other segments without reading them."""
    names = sorted(segments)
    return (
        f"SELECT $segmentName, COUNT(*) FROM {table} "
        f"WHERE $segmentName IN ({', '.join(map(_sql_text, names))}) "
        f"GROUP BY $segmentName LIMIT {len(names)} OPTION(skipUpsert=true)"
    )


def rows_per_segment(answer: dict[str, Any]) -> dict[str, int]:
    """segment -> rows, from the broker's answer to :func:`count_sql` (a segment without
    a row has no group). CommitError unless every server queried answered cleanly."""
    if answer.get("exceptions"):
        raise CommitError(f"the broker answered with exceptions: {answer['exceptions']}")
    queried = answer.get("numServersQueried", 0)
    if not queried or answer.get("numServersResponded", 0) < queried:
        raise CommitError(
            f"{answer.get('numServersResponded', 0)} of {queried} servers answered the count"
        )
    rows = (answer.get("resultTable") or {}).get("rows") or []
    return {str(name): int(count) for name, count in rows}


def _count_rows(broker: httpx.Client, table: str, segments: list[str]) -> dict[str, int]:
    answer = broker.post("/query/sql", json={"sql": count_sql(table, segments)})
    answer.raise_for_status()
    return rows_per_segment(answer.json())


def commit_consuming(
    controller_url: str, broker_url: str, tables: Iterable[str], timeout: float
) -> CommitReport:
    """Force-commit the consuming segments of ``tables`` and wait, at most ``timeout``
    seconds in all, until the controller holds each of them.

    A table is committed only when each of its consuming segments holds a row. Pinot 0.11's
    forceCommit takes every consuming segment of a table, and 0.11 cannot load an empty
    committed segment of a dedup table (``order_items_enriched``: the server's
    ``addSegment`` casts the EmptyIndexSegment it loads, so the segment would be in ERROR
    at every start). Records are spread over partitions by order id: a table with a
    partition that got none since its segment began got few in the others, far from the
    256 MiB more a partition needs before the byte cap deletes a segment's start."""
    started = time.monotonic()
    deadline = started + timeout
    report = CommitReport()
    asked: dict[str, list[str]] = {}
    controller = Controller(controller_url, timeout=10.0)
    try:
        with httpx.Client(base_url=broker_url.rstrip("/"), timeout=10.0) as broker:
            for table in tables:
                if time.monotonic() >= deadline:
                    report.failed[table] = f"no time left of {timeout:.0f} s"
                    continue
                try:
                    ideal = controller.call(
                        "GET", f"/tables/{table}/idealstate", tableType="realtime"
                    )
                    segments = consuming_segments((ideal or {}).get("REALTIME"))
                    if not segments:
                        report.skipped[table] = "no consuming segment"
                        continue
                    rows = _count_rows(broker, table, segments)
                    empty = [s for s in segments if not rows.get(s)]
                    if len(empty) == len(segments):
                        report.skipped[table] = "nothing consumed since its last commit"
                        continue
                    if empty:
                        report.skipped[table] = (
                            f"{', '.join(empty)} holds no row yet (a table commits all its "
                            "consuming segments at once, and Pinot 0.11 cannot load an empty "
                            "one of a dedup table)"
                        )
                        continue
                    controller.call("POST", f"/tables/{table}/forceCommit")
                    asked[table] = segments
                except (LoaderError, CommitError, httpx.HTTPError, ValueError) as exc:
                    report.failed[table] = str(exc)
        report.pending = _wait_committed(controller, asked, deadline)
    finally:
        controller.close()
    for table, segments in asked.items():
        done = [s for s in segments if s not in report.pending]
        if done:
            report.committed[table] = done
    report.seconds = time.monotonic() - started
    return report


def _wait_committed(
    controller: Controller, asked: dict[str, list[str]], deadline: float
) -> dict[str, str]:
    """segment -> last status, of those the controller does not hold by ``deadline``."""
    pending = {segment: "IN_PROGRESS" for segments in asked.values() for segment in segments}
    table_of = {segment: table for table, segments in asked.items() for segment in segments}
    while pending:
        for segment in sorted(pending):
            try:
                record = controller.call(
                    "GET", f"/segments/{table_of[segment]}_REALTIME/{segment}/metadata"
                )
            except (LoaderError, httpx.HTTPError) as exc:
                pending[segment] = f"unknown ({exc})"
            else:
                status = record.get(STATUS, "?") if isinstance(record, dict) else "no metadata"
                if status in COMPLETED:
                    del pending[segment]
                else:
                    pending[segment] = status
            if time.monotonic() >= deadline:
                break
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return pending

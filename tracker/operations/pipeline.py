"""How far behind each stage of the pipeline is: ok, behind or stalled.

Measured from outside the stages, the way Kafka consumer lag is: a stopped or hung
process cannot report on itself. Every few seconds one thread per web process samples

* the outbox: rows written (its input) and rows not yet published (the relay's lag);
* for each Kafka reader, the end offsets of the topics it reads (its input) and its
  position (:mod:`runtime.offsets`; Pinot's from its controller,
  :class:`~tracker.operations.pinot_controller.PinotController`): lag = end - position.

Each stage is judged ok, behind or stalled (:mod:`tracker.operations.stages`) against
``PIPELINE_STALL_SECONDS`` and ``PIPELINE_BEHIND_RECORDS``. The same figures are exported
as metrics, answered by ``/api/v1/operations/pipeline/`` and ``/readyz``, and pushed to
the operators' sockets.

Each sample also says whether the monitor reached each dependency (the database, Kafka,
Pinot and, when configured, Redis: ``ordertrack_dependency_up``) and how many copies of
the product's data are missing where a store keeps several (``ordertrack_replicas_missing``:
Kafka partitions whose in-sync replicas are fewer than their replicas, or that have no
leader, every sample; Pinot segments served by fewer replicas than the controller assigned,
every ``PIPELINE_REPLICAS_SECONDS``: two requests per table, whose answers change only
when a server comes or goes). A lost broker or Pinot server changes no stage's lag while its replicas serve, so
only these show it; the alerts of deploy/prometheus/alerts.yml fire on them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from confluent_kafka import TopicPartition
from django.conf import settings
from django.db import close_old_connections
from django.db.models import Max
from prometheus_client import Gauge

from contract.events import ENRICHED_TOPICS, SOURCE_TOPICS, topic_name
from runtime import kafka
from runtime.conf import env_float, env_int
from runtime.offsets import GroupOffsets, offsets_by_reader
from tracker.operations.checks import cache_check
from tracker.operations.pinot_controller import PinotController
from tracker.operations.replicas import partitions_out_of_sync
from tracker.operations.stages import BEHIND, NOT_RUNNING, OK, STAGES, STALLED, StageState
from tracker.outbox.models import OutboxEvent

log = logging.getLogger(__name__)

STAGE_LAG = Gauge(
    "ordertrack_pipeline_stage_lag",
    "Records (outbox rows for the relay) a stage has not processed yet",
    ["stage"],
    multiprocess_mode="livemax",
)
STAGE_INPUT = Gauge(
    "ordertrack_pipeline_stage_input_total",
    "Records that have reached a stage's input (topic end offsets; outbox rows written)",
    ["stage"],
    multiprocess_mode="livemax",
)
STAGE_STALLED = Gauge(
    "ordertrack_pipeline_stage_stalled",
    "1 while a stage is stalled: its lag grows with its input and it does not move",
    ["stage"],
    multiprocess_mode="livemax",
)
STAGE_BEHIND = Gauge(
    "ordertrack_pipeline_stage_behind",
    "1 while a stage is behind or stalled",
    ["stage"],
    multiprocess_mode="livemax",
)
DEPENDENCY_UP = Gauge(
    "ordertrack_dependency_up",
    "1 while the pipeline monitor reaches a dependency, 0 when its last try failed",
    ["dependency"],
    multiprocess_mode="livemin",
)
REPLICAS_MISSING = Gauge(
    "ordertrack_replicas_missing",
    "Kafka partitions out of sync or leaderless; Pinot segments short of their replicas",
    ["store"],
    multiprocess_mode="livemax",
)
TOPIC_END = Gauge(
    "ordertrack_kafka_topic_end_offset",
    "Next offset of each topic, summed over its partitions (records ever written)",
    ["topic"],
    multiprocess_mode="livemax",
)


class PipelineMonitor:
    """Samples every stage every ``interval`` seconds on a background thread."""

    def __init__(
        self,
        interval: float | None = None,
        stall_seconds: float | None = None,
        behind_records: int | None = None,
    ) -> None:
        self.interval = interval or env_float("PIPELINE_SAMPLE_SECONDS", 2.0)
        self.stall_seconds = stall_seconds or env_float("PIPELINE_STALL_SECONDS", 30.0)
        self.behind_records = behind_records or env_int("PIPELINE_BEHIND_RECORDS", 5000)
        self.replicas_seconds = env_float("PIPELINE_REPLICAS_SECONDS", 30.0)
        self.stages = {s.name: StageState(s.name, s.label) for s in STAGES}
        self.sampled_at: float | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cons = None
        self._admin = None
        self._offsets: GroupOffsets | None = None
        self._pinot: PinotController | None = None
        self._segments_at: float | None = None

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> dict[str, Any]:
        """What the endpoint, readiness and the operators' strip show."""
        with self._lock:
            stages = [
                self.stages[s.name].public()
                for s in STAGES
                if not (s.optional and self.stages[s.name].error == NOT_RUNNING)
            ]
        statuses = {s["status"] for s in stages}
        overall = next((s for s in (STALLED, BEHIND) if s in statuses), OK)
        return {
            "status": overall,
            "sampled_at": self.sampled_at,
            "stall_seconds": self.stall_seconds,
            "behind_records": self.behind_records,
            "stages": stages,
        }

    # ------------------------------------------------------------------ sampling

    def start(self) -> PipelineMonitor:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pipeline-monitor", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """The thread ends after its current sample (which may be waiting on a timeout)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                try:
                    self.sample()
                finally:
                    close_old_connections()
            except Exception:  # noqa: BLE001 - the monitor must outlive every outage
                log.exception("pipeline monitor: sample failed")
            self._stop.wait(max(0.1, self.interval - (time.monotonic() - started)))
        self._drop_clients()
        if self._pinot is not None:
            self._pinot.close()

    def sample(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        measured: dict[str, tuple[int, int] | str] = {}
        try:
            measured["relay"] = self._outbox()
            DEPENDENCY_UP.labels("database").set(1)
        except Exception as exc:  # noqa: BLE001
            measured["relay"] = f"database: {exc.__class__.__name__}"
            DEPENDENCY_UP.labels("database").set(0)
        pinot = self._pinot_positions()
        try:
            measured.update(self._readers(pinot))
            DEPENDENCY_UP.labels("kafka").set(1)
            self._kafka_replicas()
        except Exception as exc:  # noqa: BLE001 - the Kafka stages are unknown
            # A node that died still leads its partitions until the cluster fences it (a
            # few seconds): asked about them, the client times out. The others answering
            # means copies are missing (ReplicasMissing), not that Kafka is down.
            self._drop_clients()
            missing = self._replicas_unanswered()
            DEPENDENCY_UP.labels("kafka").set(int(missing is not None))
            if missing is not None:
                REPLICAS_MISSING.labels("kafka").set(missing)
            cause = "broker" if missing is None else "replicas missing"
            for stage in STAGES[1:]:
                measured[stage.name] = f"{cause}: {exc.__class__.__name__}: {exc}"[:200]
        if self._segments_at is None or now - self._segments_at >= self.replicas_seconds:
            self._segments_at = now
            self._pinot_replicas()
        if settings.REDIS_URL:
            DEPENDENCY_UP.labels("redis").set(int(cache_check() == "ok"))
        with self._lock:
            for name, value in measured.items():
                self.stages[name].judge(
                    value,
                    now,
                    stall_seconds=self.stall_seconds,
                    behind_records=self.behind_records,
                )
            self.sampled_at = time.time()
        snap = self.snapshot()
        for stage in snap["stages"]:
            if stage["lag"] is not None:
                STAGE_LAG.labels(stage["name"]).set(stage["lag"])
                STAGE_INPUT.labels(stage["name"]).set(stage["input_total"])
            STAGE_STALLED.labels(stage["name"]).set(stage["status"] == STALLED)
            STAGE_BEHIND.labels(stage["name"]).set(stage["status"] in (BEHIND, STALLED))

    def _controller(self) -> PinotController:
        """One client for every request to Pinot's controller, kept for the monitor's life."""
        if self._pinot is None:
            self._pinot = PinotController(timeout=2.0)
        return self._pinot

    def _pinot_positions(self) -> dict[str, dict[int, int]] | None:
        """Pinot's consuming positions (its consumers commit nothing to Kafka); None when
        the controller does not answer, which is Pinot being down
        (``ordertrack_dependency_up``)."""
        try:
            positions = self._controller().positions()
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("pipeline monitor: Pinot's consuming segments: %s", exc)
            DEPENDENCY_UP.labels("pinot").set(0)
            return None
        DEPENDENCY_UP.labels("pinot").set(1)
        return positions

    def _kafka_replicas(self) -> None:
        """Partitions missing in-sync copies, from the cluster's metadata."""
        try:
            metadata = self._cons.list_topics(timeout=5)
            missing = partitions_out_of_sync(metadata, _replicated_topics())
            REPLICAS_MISSING.labels("kafka").set(missing)
        except Exception as exc:  # noqa: BLE001 - counted as the broker being unreachable
            log.debug("pipeline monitor: Kafka metadata: %s", exc)

    def _replicas_unanswered(self, timeout: float = 3.0) -> int | None:
        """Partitions missing copies when the stages could not be measured: out of sync, or
        their end unreadable (each asked on its own, all at once, by a fresh client, so one
        dead leader's do not hold up the others). None when no partition answers or the
        cluster's metadata cannot be read: Kafka is unreachable."""
        cons = kafka.consumer()
        try:
            metadata = cons.list_topics(timeout=timeout)
            partitions = [
                (name, p)
                for name in _replicated_topics()
                if (topic := metadata.topics.get(name)) is not None
                for p in topic.partitions
            ]

            def unanswered(partition: tuple[str, int]) -> bool:
                try:
                    cons.get_watermark_offsets(TopicPartition(*partition), timeout=timeout)
                except Exception:  # noqa: BLE001 - timed out: its leader is gone
                    return True
                return False

            with ThreadPoolExecutor(max_workers=8) as pool:
                failed = {
                    p
                    for p, bad in zip(partitions, pool.map(unanswered, partitions), strict=True)
                    if bad
                }
        except Exception as exc:  # noqa: BLE001 - no metadata: Kafka is unreachable
            log.debug("pipeline monitor: Kafka metadata: %s", exc)
            return None
        finally:
            cons.close()
        if not partitions or len(failed) == len(partitions):
            return None
        return partitions_out_of_sync(metadata, _replicated_topics(), failed)

    def _pinot_replicas(self) -> None:
        """Segments short of their replicas: the controller's ideal state against what the
        servers serve. A controller that cannot be asked is down, not complete."""
        try:
            REPLICAS_MISSING.labels("pinot").set(self._controller().segments_short())
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("pipeline monitor: Pinot's segments: %s", exc)
            DEPENDENCY_UP.labels("pinot").set(0)

    def _outbox(self) -> tuple[int, int]:
        """(rows written, rows not published yet)."""
        written = OutboxEvent.objects.aggregate(n=Max("id"))["n"] or 0
        backlog = OutboxEvent.objects.filter(published_at__isnull=True).count()
        return written, backlog

    def _drop_clients(self) -> None:
        """Close the Kafka clients (made again at the next sample): a client left to the
        garbage collector keeps its threads and connections until it is collected."""
        if self._cons is not None:
            with contextlib.suppress(Exception):
                self._cons.close()
        if self._offsets is not None:
            with contextlib.suppress(Exception):
                self._offsets.close()
        self._cons = self._admin = self._offsets = None

    def _readers(self, pinot: dict[str, dict[int, int]] | None) -> dict[str, tuple[int, int] | str]:
        """Each Kafka stage's (input, lag) from end offsets and reported positions
        (``pinot``: Pinot's, from its controller; None when it did not answer)."""
        if self._cons is None:
            self._cons = kafka.consumer()
            self._admin = kafka.admin()
            self._offsets = GroupOffsets()
        names = sorted({topic_name(t) for s in STAGES for t in s.topics})
        ends = {name: kafka.end_offsets(self._cons, name, timeout=5) for name in names}
        for name, parts in ends.items():
            TOPIC_END.labels(name).set(sum(parts.values()))
        reported = offsets_by_reader(self._admin, names, self._offsets)
        if pinot is not None:
            reported["pinot"] = pinot
        out = {}
        for stage in STAGES[1:]:
            readers = [r for r in reported if r == stage.reader or r.startswith(f"{stage.reader}-")]
            if not readers:
                out[stage.name] = NOT_RUNNING
                continue
            total = lag = 0
            for topic in (topic_name(t) for t in stage.topics):
                for partition, end in ends[topic].items():
                    # Several processes (one bridge per web worker): the most advanced one.
                    at = max(
                        (reported[r].get(topic, {}).get(partition, 0) for r in readers), default=0
                    )
                    total += end
                    lag += max(0, end - at)
            out[stage.name] = (total, lag)
        return out


def _replicated_topics() -> list[str]:
    return [topic_name(t) for t in (*SOURCE_TOPICS, *ENRICHED_TOPICS)]


_monitor: PipelineMonitor | None = None
_monitor_lock = threading.Lock()


def monitor() -> PipelineMonitor:
    """This process's monitor, started on first use."""
    global _monitor
    with _monitor_lock:
        if _monitor is None:
            _monitor = PipelineMonitor().start()
        return _monitor


def stop_monitor() -> None:
    """Stop this process's monitor, if one runs (a server's shutdown, the end of a test
    that started it): its thread would otherwise sample engines that are gone."""
    global _monitor
    with _monitor_lock:
        running, _monitor = _monitor, None
    if running is not None:
        running.stop()

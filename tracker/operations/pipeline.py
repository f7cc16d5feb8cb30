"""How far behind each stage of the pipeline is: ok, behind or stalled.

Measured from outside the stages, the way Kafka consumer lag is: a stopped or hung
process cannot report on itself. Every few seconds one thread per web process samples

* the outbox: rows written (its input) and rows not yet published (the relay's lag);
* for each Kafka reader, the end offsets of the topics it reads (its input) and its
  position (:mod:`runtime.positions`; Pinot's from its controller,
  :func:`pinot_positions`): lag = end - position.

A stage is **stalled** when its position has not moved for ``PIPELINE_STALL_SECONDS``
while its input grew within that time and its lag grew; **behind** when its lag is
above ``PIPELINE_BEHIND_RECORDS`` or it has not moved for half that time while records
wait; otherwise **ok** (also when idle: nothing to read). The same figures are exported as metrics, answered by
``/api/v1/operations/pipeline/`` and ``/readyz``, and pushed to the operators' sockets.

Each sample also says whether the monitor reached each dependency (the database, Kafka,
Pinot and, when configured, Redis: ``ordertrack_dependency_up``) and how many copies of
the product's data are missing where a store keeps several (``ordertrack_replicas_missing``:
Kafka partitions whose in-sync replicas are fewer than their replicas, or that have no
leader; Pinot segments served by fewer replicas than the controller assigned). A lost
broker or Pinot server changes no stage's lag while its replicas serve, so only these show
it; the alerts of deploy/prometheus/alerts.yml fire on them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections
from django.db.models import Max
from prometheus_client import Gauge

from contract.events import ENRICHED_TOPICS, SOURCE_TOPICS, Topic, topic_name
from runtime import kafka
from runtime.conf import env_float, env_int, env_str
from runtime.positions import GroupOffsets, positions_by_reader
from tracker.outbox.models import OutboxEvent

log = logging.getLogger(__name__)

OK, BEHIND, STALLED, UNKNOWN = "ok", "behind", "stalled", "unknown"


@dataclass(frozen=True)
class StageDef:
    name: str
    label: str
    #: The reader name it reports positions as (a prefix: ``bridge`` matches
    #: ``bridge-<pid>``); None for the relay, measured from the outbox.
    reader: str | None
    topics: tuple[Topic, ...] = ()


STAGES = (
    StageDef("relay", "Outbox relay", None),
    StageDef("stream", "Spark stream job", "stream", SOURCE_TOPICS),
    StageDef("pinot", "Pinot ingestion", "pinot", ENRICHED_TOPICS),
    StageDef("bridge", "Push bridge", "bridge", (Topic.ORDER_STATUSES, Topic.ORDERS_ENRICHED)),
)

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


@dataclass
class StageState:
    name: str
    label: str
    status: str = UNKNOWN
    lag: int | None = None
    input_total: int | None = None
    #: Records per second the stage processed over the last sample interval.
    rate: float | None = None
    #: Seconds it has not moved while records wait (0 when moving or idle).
    stuck_seconds: float = 0.0
    error: str | None = None
    # not reported:
    _position: int | None = field(default=None, repr=False)
    _moved_at: float = field(default=0.0, repr=False)
    _lag_at_move: int = field(default=0, repr=False)
    _inputs: deque[tuple[float, int]] = field(default_factory=deque, repr=False)
    _sampled_at: float = field(default=0.0, repr=False)

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


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
        self.stages = {s.name: StageState(s.name, s.label) for s in STAGES}
        self.sampled_at: float | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cons = None
        self._admin = None
        self._offsets: GroupOffsets | None = None

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> dict[str, Any]:
        """What the endpoint, readiness and the operators' strip show."""
        with self._lock:
            stages = [self.stages[s.name].public() for s in STAGES]
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

    def sample(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        measured: dict[str, tuple[int, int] | str] = {}
        try:
            measured["relay"] = self._outbox()
            DEPENDENCY_UP.labels("database").set(1)
        except Exception as exc:  # noqa: BLE001
            measured["relay"] = f"database: {exc.__class__.__name__}"
            DEPENDENCY_UP.labels("database").set(0)
        try:
            measured.update(self._readers())
            DEPENDENCY_UP.labels("kafka").set(1)
        except Exception as exc:  # noqa: BLE001 - broker down: the Kafka stages are unknown
            self._drop_clients()
            DEPENDENCY_UP.labels("kafka").set(0)
            for stage in STAGES[1:]:
                measured[stage.name] = f"broker: {exc.__class__.__name__}: {exc}"[:200]
        self._replicas()
        if settings.REDIS_URL:
            DEPENDENCY_UP.labels("redis").set(int(_cache_answers()))
        with self._lock:
            for name, value in measured.items():
                self._judge(self.stages[name], value, now)
            self.sampled_at = time.time()
        snap = self.snapshot()
        for stage in snap["stages"]:
            if stage["lag"] is not None:
                STAGE_LAG.labels(stage["name"]).set(stage["lag"])
                STAGE_INPUT.labels(stage["name"]).set(stage["input_total"])
            STAGE_STALLED.labels(stage["name"]).set(stage["status"] == STALLED)
            STAGE_BEHIND.labels(stage["name"]).set(stage["status"] in (BEHIND, STALLED))

    def _replicas(self) -> None:
        """Copies missing in Kafka (from the cluster's metadata) and in Pinot (the
        controller's ideal state against what the servers serve); a store that cannot be
        asked is down (``ordertrack_dependency_up``), not complete."""
        if self._cons is not None:
            try:
                names = [topic_name(t) for t in (*SOURCE_TOPICS, *ENRICHED_TOPICS)]
                metadata = self._cons.list_topics(timeout=5)
                REPLICAS_MISSING.labels("kafka").set(partitions_out_of_sync(metadata, names))
            except Exception as exc:  # noqa: BLE001 - counted as the broker being unreachable
                log.debug("pipeline monitor: Kafka metadata: %s", exc)
        try:
            REPLICAS_MISSING.labels("pinot").set(pinot_segments_short(timeout=2.0))
            DEPENDENCY_UP.labels("pinot").set(1)
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

    def _readers(self) -> dict[str, tuple[int, int] | str]:
        """Each Kafka stage's (input, lag) from end offsets and reported positions."""
        if self._cons is None:
            self._cons = kafka.consumer()
            self._admin = kafka.admin()
            self._offsets = GroupOffsets()
        names = sorted({topic_name(t) for s in STAGES for t in s.topics})
        ends = {name: kafka.end_offsets(self._cons, name, timeout=5) for name in names}
        for name, parts in ends.items():
            TOPIC_END.labels(name).set(sum(parts.values()))
        reported = positions_by_reader(self._admin, names, self._offsets)
        try:  # Pinot's own consumers commit nothing to Kafka: ask its controller
            reported["pinot"] = pinot_positions(timeout=2.0)
        except httpx.HTTPError as exc:
            log.debug("pipeline monitor: Pinot's consuming segments: %s", exc)
        out = {}
        for stage in STAGES[1:]:
            readers = [r for r in reported if r == stage.reader or r.startswith(f"{stage.reader}-")]
            if not readers:
                out[stage.name] = "not running: no position reported on its topics"
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

    def _judge(self, state: StageState, value: tuple[int, int] | str, now: float) -> None:
        if isinstance(value, str):
            state.status, state.error, state.rate = UNKNOWN, value, None
            return
        total, lag = value
        position = total - lag
        state.error = None
        if state._position is None or position > state._position or lag == 0:
            if state._position is not None and now > state._sampled_at:
                state.rate = max(0, position - state._position) / (now - state._sampled_at)
            state._moved_at, state._lag_at_move = now, lag
        else:
            state.rate = 0.0
        state._position, state._sampled_at = position, now
        state.lag, state.input_total = lag, total
        # Input over the stall window: the oldest sample still inside it.
        state._inputs.append((now, total))
        while len(state._inputs) > 1 and state._inputs[1][0] <= now - self.stall_seconds:
            state._inputs.popleft()
        input_grew = total > state._inputs[0][1]
        waited = now - state._moved_at
        state.stuck_seconds = round(waited, 1) if lag else 0.0
        if waited >= self.stall_seconds and input_grew and lag > state._lag_at_move:
            state.status = STALLED
        elif lag > self.behind_records or (lag and waited >= self.stall_seconds / 2):
            state.status = BEHIND
        else:
            state.status = OK


def _consuming_offsets(info: dict[str, Any]) -> dict[str, str]:
    """partition -> offset in one server's report on a consuming segment (Pinot 0.11 and
    later forms)."""
    found = info.get("partitionToOffsetMap")
    if not found:
        found = (info.get("partitionOffsetInfo") or {}).get("currentOffsetsMap") or {}
    return found


def pinot_positions(timeout: float = 3.0) -> dict[str, dict[int, int]]:
    """How far Pinot has consumed each enriched topic: topic -> partition -> next offset
    (the lowest over replicas), from the controller's ``consumingSegmentsInfo``. Pinot's
    consumers commit nothing to Kafka; this works wherever the controller answers
    (``PINOT_CONTROLLER_URL``). Each table is named after the topic it consumes (the
    event contract; ``tests/test_pinot_tables_contract.py``). Raises ``httpx.HTTPError``."""
    url = env_str("PINOT_CONTROLLER_URL", "http://127.0.0.1:9000")
    out: dict[str, dict[int, int]] = {}
    with httpx.Client(timeout=timeout) as client:
        for topic in ENRICHED_TOPICS:
            answer = client.get(f"{url}/tables/{topic.value}/consumingSegmentsInfo")
            answer.raise_for_status()
            segments = answer.json().get("_segmentToConsumingInfoMap") or {}
            mine = out.setdefault(topic_name(topic), {})
            for replicas in segments.values():
                for info in replicas or []:
                    for partition, offset in _consuming_offsets(info).items():
                        try:
                            p, o = int(partition), int(offset)
                        except (TypeError, ValueError):
                            continue
                        mine[p] = min(o, mine.get(p, o))
    return out


def partitions_out_of_sync(metadata: Any, topics: list[str]) -> int:
    """Partitions of ``topics`` (in a ``list_topics`` answer) that have no leader or fewer
    in-sync replicas than replicas: a broker is down or falling behind."""
    count = 0
    for name in topics:
        topic = metadata.topics.get(name)
        for partition in topic.partitions.values() if topic is not None else ():
            if partition.leader < 0 or len(partition.isrs) < len(partition.replicas):
                count += 1
    return count


#: States in which a server holds a segment and answers for it.
_SERVING = {"ONLINE", "CONSUMING"}


def segments_short(ideal: dict[str, dict[str, str]], external: dict[str, dict[str, str]]) -> int:
    """Segments that fewer servers serve (the external view) than the controller assigned
    (the ideal state): a server is down, or still loading them."""
    count = 0
    for segment, assigned in ideal.items():
        wanted = sum(1 for state in assigned.values() if state in _SERVING)
        serving = sum(1 for state in (external.get(segment) or {}).values() if state in _SERVING)
        count += serving < wanted
    return count


def pinot_segments_short(timeout: float = 3.0) -> int:
    """:func:`segments_short` over every enriched table, from the controller
    (``PINOT_CONTROLLER_URL``). Raises ``httpx.HTTPError``."""
    url = env_str("PINOT_CONTROLLER_URL", "http://127.0.0.1:9000")
    count = 0
    with httpx.Client(timeout=timeout) as client:
        for topic in ENRICHED_TOPICS:
            views = []
            for view in ("idealstate", "externalview"):
                answer = client.get(
                    f"{url}/tables/{topic.value}/{view}", params={"tableType": "REALTIME"}
                )
                answer.raise_for_status()
                views.append(answer.json().get("REALTIME") or {})
            count += segments_short(*views)
    return count


def _cache_answers() -> bool:
    """Whether the cache (Redis, where the channel layer lives too) keeps a value."""
    try:
        cache.set("pipeline-monitor", "1", 5)
        return cache.get("pipeline-monitor") == "1"
    except Exception:  # noqa: BLE001 - unreachable, timed out, refused
        return False


_monitor: PipelineMonitor | None = None
_monitor_lock = threading.Lock()


def monitor() -> PipelineMonitor:
    """This process's monitor, started on first use."""
    global _monitor
    with _monitor_lock:
        if _monitor is None:
            _monitor = PipelineMonitor().start()
        return _monitor

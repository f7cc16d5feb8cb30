"""What ``make run`` prints once the system is up: one status line per component every
``CONSOLE_STATUS_SECONDS`` (10), and every warning or error the moment it is written.

Everything a child writes goes to ``var/logs/<component>.log``. Until the system is up
none of it reaches the console (the supervisor says when each component starts, is ready
or fails); after start-up, the per-micro-batch lines (the stream job's progress, Spark's "Current
batch is falling behind" from ``...streaming.runtime.ProcessingTimeExecutor``), the HTTP
client's line per Pinot query and other INFO lines appear only with ``LOG_LEVEL=debug``.
``LOG_FORMAT=json`` writes every console line as one JSON object, for log shippers.

The status lines read what exists in every deployment: the database (orders, status
changes, the outbox's backlog and publishing rate), Pinot (its broker's row count and
the records its servers consumed, from the controller), the web's
``/healthz`` and the stream job's own progress lines (batches, rows, the slowest batch).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from confluent_kafka import TopicPartition

from contract.events import topic_name
from contract.load import Load
from localrun.components import web_address
from runtime.conf import env_float, env_str, var_dir

#: A line someone must see: a warning or an error, in any of the children's formats.
PROBLEM = re.compile(r"\b(WARNING|WARN|ERROR|CRITICAL|FATAL|SEVERE)\b|Traceback|^\S*Error\b")
#: Problems or progress written per micro-batch or per request: debug only.
PER_BATCH = re.compile(
    r"Current batch is falling behind"  # Spark's ProcessingTimeExecutor, per slow batch
    r"|streaming: batch="  # the stream job's progress line
    r"|\bhttpx\b.*HTTP Request"  # one per Pinot query
)
#: Where a new log record starts; anything else continues the one before (a traceback).
RECORD_START = re.compile(
    r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d|^\d\d/\d\d/\d\d \d\d:\d\d|^INFO:|^[A-Z]+:"
)
BATCH = re.compile(r"streaming: batch=\d+ rows=(\d+) duration_ms=(\d+)")


def debug_console() -> bool:
    """``LOG_LEVEL=debug``: every line of every child on the console, as it is written."""
    return env_str("LOG_LEVEL", "INFO").lower() == "debug"


@dataclass
class _Batches:
    """The stream job's progress lines since the last status line."""

    count: int = 0
    rows: int = 0
    slowest_ms: int = 0
    last_at: float = 0.0


@dataclass
class Console:
    """Decides which child lines reach the console, and writes the status lines."""

    debug: bool = field(default_factory=debug_console)
    interval: float = field(default_factory=lambda: env_float("CONSOLE_STATUS_SECONDS", 10.0))
    pinot_url: str = field(
        default_factory=lambda: env_str("PINOT_BROKER_URL", "http://127.0.0.1:8099")
    )
    #: Where the ``web`` component answers ``/healthz``: make run's address by default;
    #: ``make run-prod`` passes its own port (a benchmark's run listens on a free one).
    web_url: str = field(default_factory=lambda: "http://{}:{}".format(*web_address()))
    _continuing: dict[str, bool] = field(default_factory=dict)
    _batches: _Batches = field(default_factory=_Batches)
    _last: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _consumer: Any = None

    # ------------------------------------------------------------ child lines

    def shows(self, name: str, line: str) -> bool:
        """Whether ``line`` of ``name`` goes to the console now (the system is up)."""
        self._observe(line)
        if self.debug:
            return True
        if PER_BATCH.search(line):
            self._continuing[name] = False
            return False
        if PROBLEM.search(line):
            self._continuing[name] = True
            return True
        if self._continuing.get(name) and line.strip() and not RECORD_START.match(line):
            return True  # the rest of a traceback or a multi-line error
        self._continuing[name] = False
        return False

    def _observe(self, line: str) -> None:
        match = BATCH.search(line)
        if match:
            with self._lock:
                self._batches.count += 1
                self._batches.rows += int(match.group(1))
                self._batches.slowest_ms = max(self._batches.slowest_ms, int(match.group(2)))
                self._batches.last_at = time.monotonic()

    # ------------------------------------------------------------ status lines

    def run(self, say: Callable[[str, str], None], running: Callable[[str], bool],
            stop: threading.Event) -> None:  # fmt: skip
        """Every ``interval``: one line per running component (``say(text, name)``)."""
        if not self.debug:  # this process's own request to Pinot's broker, each time
            logging.getLogger("httpx").setLevel(logging.WARNING)
        self.status(running)  # the baseline the first deltas are counted from
        while not stop.wait(self.interval):
            for name, text in self.status(running).items():
                say(text, name)

    def status(self, running: Callable[[str], bool]) -> dict[str, str]:
        lines: dict[str, str] = {}
        now = time.monotonic()
        elapsed = now - self._last.get("at", now) or self.interval
        sources = {
            "simulator": self._orders,
            "relay": self._outbox,
            "streaming": self._stream,
            "pinot": self._pinot,
            "web": self._web,
            "notifier": self._notifier,
        }
        for name, source in sources.items():
            if not running(name):
                continue
            try:
                text = source(elapsed)
            except Exception as exc:  # noqa: BLE001 - a status must never stop the console
                text = f"status unavailable: {exc.__class__.__name__}: {exc}"
            if text:
                lines[name] = text
        self._last["at"] = now
        return lines

    def _delta(self, key: str, value: int) -> int | None:
        before = self._last.get(key)
        self._last[key] = value
        return None if before is None else value - before

    def _orders(self, elapsed: float) -> str:
        from tracker.orders.models import Order, OrderStatusChange

        orders, changes = Order.objects.count(), OrderStatusChange.objects.count()
        new, moved = self._delta("orders", orders), self._delta("changes", changes)
        if new is None or moved is None:
            return ""
        active = Order.objects.exclude(status__in=["DELIVERED", "CANCELLED"]).count()
        text = (
            f"orders {orders:,} ({active:,} active), {new / elapsed * 60:.0f} placed/min, "
            f"{moved / elapsed:.1f} status changes/s"
        )
        try:
            points = self._delta("points", self._points())
        except Exception as exc:  # noqa: BLE001 - Kafka not reachable from here: orders still show
            return text + f"; GPS points unavailable: {exc.__class__.__name__}"
        if points is None:
            return text
        # The level in real units (contract/load.py): GPS points are 99% of the events.
        level = Load.of_points(points / elapsed).multiple
        return text + f", {points / elapsed:,.0f} GPS points/s ({level:.2f}x in points)"

    def _points(self) -> int:
        """GPS points Kafka has taken so far (``delivery_locations``' end offsets), through
        one consumer kept for the console's life."""
        from contract.events import Topic, topic_name
        from runtime import kafka

        if self._consumer is None:
            self._consumer = kafka.consumer()
        # As short as the other status reads: a broker out of reach must not hold the line.
        ends = kafka.end_offsets(self._consumer, topic_name(Topic.DELIVERY_LOCATIONS), timeout=2.0)
        return sum(ends.values())

    def _outbox(self, elapsed: float) -> str:
        from django.utils import timezone

        from tracker.outbox.models import OutboxEvent

        waiting = OutboxEvent.objects.filter(published_at__isnull=True)
        backlog = waiting.count()
        oldest = waiting.order_by("id").values_list("created_at", flat=True).first()
        published = self._delta("published", OutboxEvent.objects.count() - backlog)
        if published is None:
            return ""
        lag = (
            "" if oldest is None else f", oldest {(timezone.now() - oldest).total_seconds():.1f} s"
        )
        return f"{published / elapsed:.1f} events/s to Kafka; outbox backlog {backlog:,}{lag}"

    def _stream(self, elapsed: float) -> str:
        with self._lock:
            batches, self._batches = self._batches, _Batches(last_at=self._batches.last_at)
        if batches.count == 0:
            since = time.monotonic() - batches.last_at if batches.last_at else None
            return "no micro-batch" + (f" for {since:.0f} s" if since else " yet")
        return (
            f"{batches.count} batches, {batches.rows / elapsed:.0f} rows/s, "
            f"slowest batch {batches.slowest_ms / 1000:.1f} s"
        )

    def _notifier(self, elapsed: float) -> str:
        """Sent, failed and dropped since the last line, per channel, and the notifier's lag
        (its consumer group's committed offsets against the topics' ends)."""
        from django.db.models import Count

        from runtime import kafka
        from runtime.offsets import GroupOffsets, offsets_group
        from tracker.notifications.models import Delivery
        from tracker.notifications.notifier import TOPICS

        counts = Delivery.objects.values_list("channel", "state").annotate(n=Count("id"))
        parts = []
        for channel, state, n in sorted(counts):
            added = self._delta(f"notify:{channel}:{state}", n)
            if added and state != "sending":
                parts.append(f"{channel} {state} {added}")
        names = [topic_name(t) for t in TOPICS]
        cons, offsets = kafka.consumer(), GroupOffsets()
        try:
            wanted = [
                TopicPartition(name, p) for name in names for p in kafka.end_offsets(cons, name)
            ]
            done = {(tp.topic, tp.partition): tp.offset
                    for tp in offsets.committed(offsets_group("notifier"), wanted, timeout=5)}  # fmt: skip
            lag = sum(
                max(0, end - max(0, done.get((name, p), 0)))
                for name in names
                for p, end in kafka.end_offsets(cons, name).items()
            )
        finally:
            cons.close()
            offsets.close()
        mail, push = var_dir() / "mail", var_dir() / "push"
        mails = len(list(mail.glob("*.eml")))
        pushes = sum(len(p.read_bytes().splitlines()) for p in push.glob("*.jsonl"))
        sent = ", ".join(parts) or "nothing new"
        return (
            f"{sent}; lag {lag:,} records; {mails:,} mails in {mail}/, "
            f"{pushes:,} pushes in {push}/<customer>.jsonl"
        )

    def _web(self, elapsed: float) -> str:
        answer = httpx.get(f"{self.web_url}/healthz", timeout=2.0)
        checks = ", ".join(f"{k} {v}" for k, v in answer.json()["checks"].items())
        return f"{answer.json()['status']} ({checks})"

    def _pinot(self, elapsed: float) -> str:
        from tracker.operations.pinot_controller import PinotController

        with PinotController() as controller:
            consumed = sum(sum(parts.values()) for parts in controller.positions().values())
        added = self._delta("consumed", consumed)
        rate = "" if added is None else f", {added / elapsed:.0f} records/s"
        answer = httpx.post(
            f"{self.pinot_url}/query/sql",
            json={"sql": "SELECT COUNT(*) FROM orders_enriched"},
            timeout=2.0,
        ).json()
        rows = answer.get("resultTable", {}).get("rows") or [[0]]
        errors = answer.get("exceptions") or []
        text = f"{rows[0][0]:,} orders; {consumed:,} records consumed{rate}"
        return text + (f"; {errors[0].get('message', '')[:120]}" if errors else "")

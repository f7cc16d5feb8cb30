"""``make run``'s console: during start-up one line per component as it starts and is ready
(or fails, with the last lines of its log), none of the children's own lines; after it a
status line per component, every warning and error at once, per-batch and per-request
lines only with ``LOG_LEVEL=debug``."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from localrun.components import Component
from localrun.console import Console
from localrun.supervisor import TAIL_LINES, Supervisor
from tests.factories import make_customer, make_restaurant, place
from tests.waiting import wait_until
from tracker.outbox.models import OutboxEvent

# Lines as the children write them (from var/logs/ of a long run).
SPARK_BEHIND = (
    "stream execution thread for ordertrack_enrich [id = 5ac1, runId = a2b3] WARN Current batch "
    "is falling behind. The trigger interval is 500 milliseconds, but spent 1713 milliseconds"
)
BATCH = (
    "2026-11-24 22:57:01,120 INFO streaming streaming: batch=42 rows=310 duration_ms=1713 "
    "add_batch_ms=900 latest_offset_ms=12 planning_ms=80 wal_ms=5 commit_ms=9 state_rows=900"
)
HTTPX = '2026-11-24 22:57:01,300 INFO httpx HTTP Request: POST http://127.0.0.1:8099/query/sql "HTTP/1.1 200 OK"'
RELAY_WARNING = (
    "2026-11-24 22:58:10,001 WARNING tracker.outbox.relay relay: broker unavailable (3 of 3 "
    "outbox events not acknowledged); retrying in 1.0s"
)
PINOT_INFO = "2026-11-24 22:58:11,002 pinot INFO topic orders_enriched rolled over"
TRACEBACK = [
    "2026-11-24 22:59:00,000 ERROR django.request Internal Server Error: /api/v1/orders/",
    "Traceback (most recent call last):",
    '  File "tracker/orders/services.py", line 10, in place_order',
    "ZeroDivisionError: division by zero",
]


def test_after_start_up_only_problems_reach_the_console():
    console = Console(debug=False)
    assert not console.shows("streaming", SPARK_BEHIND)
    assert not console.shows("streaming", BATCH)
    assert not console.shows("web", HTTPX)
    assert not console.shows("pinot", PINOT_INFO)
    assert console.shows("relay", RELAY_WARNING)
    assert [console.shows("web", line) for line in TRACEBACK] == [True] * 4
    assert not console.shows("web", HTTPX)  # a new record ends the traceback
    debug = Console(debug=True)
    assert all(debug.shows("streaming", line) for line in (SPARK_BEHIND, BATCH, HTTPX))


@pytest.mark.django_db
def test_status_lines_count_orders_events_batches_and_pinot_lag(real_pinot, pinot, monkeypatch):
    monkeypatch.setenv("PINOT_CONTROLLER_URL", real_pinot.controller_url)
    console = Console(debug=False, pinot_url=real_pinot.broker_url)
    running = {"simulator", "relay", "streaming", "pinot"}.__contains__  # no web here
    assert set(console.status(running)) == {"streaming", "pinot"}  # the rest needs a baseline
    customer, restaurant = make_customer(), make_restaurant()
    for _ in range(3):
        place(customer, restaurant)
    console.shows("streaming", BATCH)
    lines = console.status(running)
    assert lines["simulator"].startswith("orders 3 (3 active), ")
    waiting = OutboxEvent.objects.filter(published_at__isnull=True).count()
    assert waiting >= 3 and f"outbox backlog {waiting}, oldest" in lines["relay"]
    assert (
        lines["streaming"].startswith("1 batches, ") and "slowest batch 1.7 s" in lines["streaming"]
    )
    # Pinot's own figures: rows from its broker, consumed offsets from its controller.
    assert re.fullmatch(r"[\d,]+ orders; [\d,]+ records consumed, \d+ records/s", lines["pinot"])
    assert console.status(running)["streaming"].startswith("no micro-batch for ")


def test_the_web_status_asks_the_web_it_was_given():
    """``make run-prod`` (and a benchmark's run on a free port) passes its own address: the
    status line must not ask make run's port."""
    asked: list[str] = []

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            asked.append(self.path)
            body = json.dumps({"status": "ok", "checks": {"database": "ok"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        console = Console(debug=False, web_url=f"http://127.0.0.1:{server.server_port}")
        assert console.status({"web"}.__contains__) == {"web": "ok (database ok)"}
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/healthz"]


#: An engine's start-up chatter, as Kafka writes it (thousands of such lines).
CHATTER = "[2026-12-07 14:00:00,001] INFO [BrokerServer id=1] Waiting for the broker to be unfenced"
CHILD = """
import sys, time
print(sys.argv[1], flush=True)
print("child: ready", flush=True)
time.sleep(0.3)
for line in sys.argv[2:]:
    print(line, flush=True)
time.sleep(30)
"""


def _messages(text: str, log_format: str) -> list[tuple[str, str]]:
    """(component, message) of each console line."""
    if log_format == "json":
        records = [json.loads(line) for line in text.splitlines()]
        return [(r["component"], r["message"]) for r in records]
    return [m.groups() for m in re.finditer(r"^ *[\d.]+s (\S+) +\| (.*)$", text, re.M)]


@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_the_supervisor_shows_start_up_then_status_and_problems(monkeypatch, tmp_path, log_format):
    monkeypatch.setenv("ORDERTRACK_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("LOG_FORMAT", log_format)
    monkeypatch.setenv("LOG_LEVEL", "INFO")
    out = io.StringIO()
    lines = [SPARK_BEHIND, BATCH, HTTPX, RELAY_WARNING, PINOT_INFO]
    argv = [sys.executable, "-c", CHILD, CHATTER, *lines]
    child = Component("streaming", argv, "child: ready", 0, "the test's job")
    console = Console(interval=0.2)
    console.status = lambda running: {"streaming": "1 batches"} if running("streaming") else {}
    supervisor = Supervisor([child], out=out, console=console)

    def shown() -> list[str]:
        return [m for name, m in _messages(out.getvalue(), log_format) if name == "streaming"]

    try:
        assert supervisor.start(ready_message="ready!")
        wait_until(
            lambda: RELAY_WARNING in shown() and shown().count("1 batches") >= 2,
            30,
            "the relay's warning and two status lines",
            interval=0.05,
        )
    finally:
        supervisor.stop()
    messages = _messages(out.getvalue(), log_format)
    banner = messages.index(("system", "ready!"))
    start_up = [m for name, m in messages[:banner] if name == "streaming"]
    assert len(start_up) == 2, start_up  # one line as it starts, one as it is ready
    assert start_up[0] == "starting: the test's job"
    assert re.fullmatch(r"ready in \d+\.\d s", start_up[1])
    assert not {CHATTER, "child: ready", SPARK_BEHIND, BATCH, HTTPX, PINOT_INFO} & set(shown())
    log = (tmp_path / "logs" / "streaming.log").read_text()
    assert CHATTER in log and "child: ready" in log  # everything it wrote is kept


def test_with_log_level_debug_every_child_line_reaches_the_console(monkeypatch, tmp_path):
    monkeypatch.setenv("ORDERTRACK_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("LOG_LEVEL", "debug")
    out = io.StringIO()
    argv = [sys.executable, "-c", CHILD, CHATTER, BATCH]
    supervisor = Supervisor([Component("streaming", argv, "child: ready", 0)], out=out)
    try:
        assert supervisor.start(ready_message="ready!")
        wait_until(lambda: BATCH in out.getvalue(), 30, "the batch line", interval=0.05)
    finally:
        supervisor.stop()
    text = out.getvalue()
    assert text.index(CHATTER) < text.index("child: ready") < text.index("ready!")


def test_a_component_that_fails_to_start_is_shown_with_the_last_lines_of_its_log(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("ORDERTRACK_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("LOG_LEVEL", "INFO")
    out = io.StringIO()
    failing = "import sys\nfor n in range(1, 31): print(f'line {n}')\nsys.exit(3)"
    broken = Component("kafka", [sys.executable, "-c", failing], "never", 0, "a broker")
    supervisor = Supervisor([broken], out=out)
    try:
        assert not supervisor.start(ready_message="ready!")
    finally:
        supervisor.stop()
    messages = _messages(out.getvalue(), "plain")
    report = next(i for i, (_, m) in enumerate(messages) if m.startswith("!! kafka"))
    assert messages[report][1].startswith("!! kafka failed to start (exit code 3); the last lines")
    tail = [m.strip() for name, m in messages[report + 1 :] if name == "kafka"]
    assert tail == [f"line {n}" for n in range(31 - TAIL_LINES, 31)]
    assert ("system", "ready!") not in messages


def test_ctrl_c_during_start_up_ends_it_at_once():
    """Ctrl-C while a component is still starting (the stream job takes a minute) stops the
    system then, not once everything is ready; the stages after it never start."""
    slow = Component("streaming", [sys.executable, "-c", "import time; time.sleep(60)"], "ready", 0)
    later = Component("web", [sys.executable, "-c", "print('ready')"], "ready", 1)
    supervisor = Supervisor([slow, later], out=io.StringIO(), console=Console(interval=60))
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    supervisor.stop_on_signals()
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        assert not supervisor.start()
        # It returned for the Ctrl-C: the slow child neither became ready nor ended.
        assert supervisor.stopping.is_set() and supervisor.children[0].process.poll() is None
    finally:
        supervisor.stop()
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    slow_child, later_child = supervisor.children
    assert slow_child.process.poll() is not None  # stopped, not left running
    assert later_child.process is None  # the next stage never started

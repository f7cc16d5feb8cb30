"""The live layer's Prometheus metrics: the push bridge's delays and the open sockets.

Defined once here, so the web processes and ``manage.py pushbridge`` register the same
names whichever of the live modules they import.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from contract.events import now_ms

BRIDGE_DELAY = Gauge(
    "ordertrack_push_bridge_delay_seconds",
    "Age of the newest record the push bridge handled from each topic (0 when caught up)",
    ["topic"],
    multiprocess_mode="livemax",
)
BRIDGE_RECORDS = Counter(
    "ordertrack_push_bridge_records_total", "Records the push bridge consumed", ["topic"]
)
_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BRIDGE_RECORD_AGE = Histogram(
    "ordertrack_push_bridge_record_age_seconds",
    "How old each record was when the push bridge received it, from its timestamp (a "
    "status: the relay's produce; a GPS point: the courier's fix)",
    ["topic"],
    buckets=_SECONDS,
)
BRIDGE_HANDLE = Histogram(
    "ordertrack_push_bridge_handle_seconds",
    "Time from a poll's records to their messages accepted by the channel layer",
    ["topic"],
    buckets=_SECONDS,
)

OPEN_SOCKETS = Gauge(
    "ordertrack_websockets_open",
    "WebSockets open, by kind of socket",
    ["socket"],
    multiprocess_mode="livesum",
)


def measure_poll(seen: dict[str, list[int]], drained: bool) -> None:
    """Count one poll's records (``seen``: topic -> [records, newest timestamp in ms]) and
    set the delay gauges: how old the newest record handled is; 0 once the poll came back
    short (caught up) with nothing from that topic."""
    now = now_ms()
    for topic, (count, stamp) in seen.items():
        if count:
            BRIDGE_RECORDS.labels(topic).inc(count)
            BRIDGE_DELAY.labels(topic).set(max(0.0, (now - stamp) / 1000))
        elif drained:
            BRIDGE_DELAY.labels(topic).set(0.0)

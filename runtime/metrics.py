"""Prometheus metrics: every process serves ``/metrics``; names and ports are stated once here.

Each long-running process of ours exposes its own figures (the web on its own port,
the others on a port of their own, see :data:`PORTS`); Apache Pinot and Kafka publish
theirs through JMX, and pipeline health reads Pinot's position from its controller. The web's ASGI workers share one exposition through
prometheus-client's multi-process mode (:func:`use_multiprocess_dir`).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from runtime.conf import env_int, env_str

log = logging.getLogger(__name__)

#: Process -> (environment variable, default port) of its ``/metrics`` server. The web
#: serves ``/metrics`` on its own HTTP port instead.
PORTS = {
    "relay": ("RELAY_METRICS_PORT", 9101),
    "streaming": ("STREAMING_METRICS_PORT", 9102),
    "pushbridge": ("PUSH_BRIDGE_METRICS_PORT", 9103),
    "notifier": ("NOTIFIER_METRICS_PORT", 9104),
}

#: Every metric name this project exports, by process (checked by tests and the docs).
NAMES = {
    "relay": (
        "ordertrack_outbox_backlog_rows",
        "ordertrack_outbox_oldest_unpublished_age_seconds",
        "ordertrack_outbox_published_total",
        "ordertrack_outbox_skipped_total",
    ),
    "streaming": (
        "ordertrack_stream_input_rows_per_second",
        "ordertrack_stream_processed_rows_per_second",
        "ordertrack_stream_batch_duration_seconds",
        "ordertrack_stream_input_rows_total",
        "ordertrack_stream_records_behind",
        "ordertrack_stream_state_rows",
        "ordertrack_stream_state_eviction_seconds",
        "ordertrack_stream_dead_letters_total",
        "ordertrack_stream_last_batch_timestamp_seconds",
    ),
    "notifier": (
        "ordertrack_notifications_sent_total",
        "ordertrack_notifications_failed_total",
        "ordertrack_notifications_retried_total",
        "ordertrack_notifications_dropped_total",
        "ordertrack_notifications_delay_seconds",
    ),
    "web": (
        "ordertrack_http_request_duration_seconds",
        "ordertrack_http_requests_queued",
        "ordertrack_http_requests_shed_total",
        "ordertrack_websockets_open",
        "ordertrack_order_state_reads_total",
        "ordertrack_push_bridge_delay_seconds",
        "ordertrack_push_bridge_records_total",
        "ordertrack_push_bridge_record_age_seconds",
        "ordertrack_push_bridge_handle_seconds",
        "ordertrack_kafka_topic_end_offset",
        "ordertrack_pipeline_stage_lag",
        "ordertrack_pipeline_stage_input_total",
        "ordertrack_pipeline_stage_stalled",
        "ordertrack_pipeline_stage_behind",
        "ordertrack_dependency_up",
        "ordertrack_replicas_missing",
    ),
}


def metrics_host() -> str:
    return env_str("METRICS_HOST", "127.0.0.1")


def serve_metrics(process: str) -> int | None:
    """Serve the default registry on ``process``'s port; the port, or None when it is 0
    or taken (logged: the process goes on without metrics)."""
    from prometheus_client import start_http_server

    variable, default = PORTS[process]
    port = env_int(variable, default)
    if port <= 0:
        return None
    try:
        server, _ = start_http_server(port, addr=metrics_host())
    except OSError as exc:  # a port in use must not stop the work itself
        log.warning(
            "%s: no metrics: cannot listen on %s:%d (%s)", process, metrics_host(), port, exc
        )
        return None
    port = server.server_address[1]
    log.info("%s: metrics on http://%s:%d/metrics", process, metrics_host(), port)
    return port


def use_multiprocess_dir(directory: Path) -> None:
    """Point prometheus-client at a directory shared by sibling worker processes.

    Takes effect only before ``prometheus_client`` is first imported in the process (it
    chooses its value store on import); otherwise (a test server inside another process)
    nothing changes. A directory already set in the environment wins.
    """
    if "prometheus_client" in sys.modules:
        return
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        directory.mkdir(parents=True, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)


def multiprocess_mode() -> bool:
    """Whether this process keeps its metrics in the shared directory."""
    from prometheus_client import values

    return values.ValueClass is not values.MutexValue

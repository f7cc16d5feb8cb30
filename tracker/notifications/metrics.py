"""The notifier's Prometheus metrics (served by ``manage.py notify``, :data:`runtime.metrics.PORTS`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

SENT = Counter(
    "ordertrack_notifications_sent_total", "Notifications the channel accepted", ["channel"]
)
FAILED = Counter(
    "ordertrack_notifications_failed_total",
    "Notifications given up on (refused for good, or still failing after the retry bound; "
    "an email whose outcome a crash left unknown counts as reason=unknown)",
    ["channel", "reason"],
)
RETRIED = Counter(
    "ordertrack_notifications_retried_total",
    "Sends tried again (429, 5xx, a timeout or a refused connection)",
    ["channel"],
)
DROPPED = Counter(
    "ordertrack_notifications_dropped_total",
    "Moments logged as dropped, not sent: older than NOTIFY_MAX_AGE_SECONDS when decided",
    ["channel"],
)
DELAY = Histogram(
    "ordertrack_notifications_delay_seconds",
    "From the event's time to the channel's acceptance",
    ["channel"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)

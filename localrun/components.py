"""Every process of the running system, in start order: the one list ``python -m localrun`` reads.

A new component is one entry here: its command, the line it prints when it is ready,
the stage it starts in (a stage starts when the previous one is ready) and what to say
while waiting.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.load import BOOK_PEAK_ORDERS_PER_MINUTE
from localrun.pinot import STOP_TIMEOUT as PINOT_STOP_TIMEOUT
from runtime.conf import BASE_DIR, env_bool, env_float, env_int, env_str, kafka_config

PYTHON = sys.executable
MANAGE = str(BASE_DIR / "manage.py")


@dataclass(frozen=True)
class Component:
    """One process of the embedded system: how to start it, how to tell it is ready, and when."""

    name: str
    argv: list[str]
    #: A substring of the child's output that means "ready".
    ready_text: str
    stage: int
    #: What it is, on its "starting" line (and why it may take a while: Spark's warm-up).
    waiting_note: str = ""
    enabled: Callable[[], bool] = field(default=lambda: True)
    ready_timeout: float = 120.0
    #: How long it may take to stop after SIGTERM before its process group is killed
    #: (Pinot commits its consuming segments first, while Kafka, a stage below, is up).
    stop_timeout: float = 10.0
    #: The child's whole environment (default: the supervisor's own, inherited).
    env: dict[str, str] | None = None


def web_address() -> tuple[str, int]:
    return env_str("WEB_HOST", "127.0.0.1"), env_int("WEB_PORT", 8000)


def components() -> list[Component]:
    host, port = web_address()
    # Django runs sync views on one thread per process: two processes use both cores.
    workers = ["--workers", str(env_int("WEB_WORKERS", 2))]
    # A client frame over WS_MAX_MESSAGE_BYTES is closed with 1009 before it is read.
    frames = ["--ws-max-size", str(env_int("WS_MAX_MESSAGE_BYTES", 4096))]
    web = ["-m", "uvicorn", "config.asgi:application", "--no-access-log", *workers, *frames]
    listen = ["--host", host, "--port", str(port)]
    rate = ["--rate", str(env_float("SIMULATOR_RATE", BOOK_PEAK_ORDERS_PER_MINUTE))]
    pace = ["--pace", str(env_float("SIMULATOR_PACE", 4.0))]
    # The stream job's first micro-batch needs input, so it starts beside the simulator.
    return [
        Component("kafka", [PYTHON, "-m", "localrun.kafka"], "kafka: topics ready", 0,
                  "Apache Kafka (one KRaft node, jvm/kafka)",
                  enabled=lambda: kafka_config().embedded),
        Component("relay", [PYTHON, MANAGE, "relay"], "relay: publishing", 1,
                  "the outbox relay (database to Kafka)"),
        Component("pinot", [PYTHON, "-m", "localrun.pinot"], "pinot: ready", 1,
                  "Apache Pinot (ZooKeeper, controller and broker, server: jvm/pinot)",
                  enabled=lambda: env_bool("PINOT_EMBEDDED", True), ready_timeout=240.0,
                  stop_timeout=PINOT_STOP_TIMEOUT),
        Component("web", [PYTHON, *web, *listen], "Application startup complete", 1,
                  f"Django ASGI server on http://{host}:{port}"),
        # A laptop stopped longer than Kafka's local retention (3 days) resumes: the job
        # skips what retention deleted and says so (streaming.checkpoint.retention_losses).
        # One machine's two cores run everything here: a micro-batch every two seconds,
        # not ten a second (statuses and points reach sockets through the push bridge's
        # fast path; the trigger sets how soon Pinot and the enriched updates follow;
        # docs/performance.md, "The cost at rest on the real engines").
        Component("streaming", [PYTHON, "-m", "streaming"], "streaming: ready", 2,
                  "Spark Structured Streaming job (JVM warm-up takes ~20 s)", ready_timeout=240.0,
                  env={**os.environ,
                       # The driver's RPC and block manager ports on loopback (local[2]:
                       # no executor elsewhere needs them), not on the machine's address.
                       "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1",
                       "STREAMING_FAIL_ON_DATA_LOSS":
                       os.environ.get("STREAMING_FAIL_ON_DATA_LOSS") or "false",
                       "STREAMING_TRIGGER_MS": os.environ.get("STREAMING_TRIGGER_MS") or "2000"}),
        Component("simulator", [PYTHON, MANAGE, "simulate", *rate, *pace], "simulator: running", 2,
                  "the simulator (demo orders)", enabled=lambda: env_bool("SIMULATOR_ENABLED", True)),
        # Customers' notifications: a local SMTP server keeping the mails, the notifier, and a
        # local push service with a few demo customers' "phones" subscribed through the API.
        Component("mailsink", [PYTHON, "-m", "localrun.mailsink"], "mailsink: ready", 0,
                  "a local SMTP server keeping every mail in var/mail/",
                  enabled=lambda: env_bool("NOTIFIER_ENABLED", True)),
        Component("notifier", [PYTHON, MANAGE, "notify"], "notifier: following", 2,
                  "the notifier (Web Push and email)",
                  enabled=lambda: env_bool("NOTIFIER_ENABLED", True)),
        Component("pushservice", [PYTHON, "-m", "localrun.pushservice"], "pushservice: ready", 2,
                  "a local Web Push service with demo customers' phones subscribed",
                  enabled=lambda: env_bool("NOTIFIER_ENABLED", True)),
    ]  # fmt: skip

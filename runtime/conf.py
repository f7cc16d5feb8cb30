"""Runtime configuration read from the environment, shared by every process.

Django reads these through ``config.settings``; the Spark job, the outbox relay,
the local engines' launchers and Pinot's table loader import this module directly so that
they never need Django to start. Every variable has an embedded default so that
``make run`` works on one machine with no configuration at all; the README lists
each of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

BASE_DIR = Path(__file__).resolve().parents[1]


def env_str(name: str, default: str) -> str:
    """Return the variable ``name`` or ``default`` when it is unset or empty."""
    value = os.environ.get(name, "")
    return value if value != "" else default


def _env_number(name: str, default: T, parse: Callable[[str], T], kind: str) -> T:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be {kind}, got {raw!r}") from exc


def env_int(name: str, default: int) -> int:
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float, "a number")


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"environment variable {name} must be a boolean, got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


#: Local runs keep each partition at most 3 days and 256 MiB (a laptop's disk stays
#: bounded over weeks of ``make run``); 3 days is well above Pinot's segment flush time
#: (6 h), so a run stopped overnight resumes without any reader losing offsets.
LOCAL_RETENTION_MS = 3 * 24 * 3600 * 1000
LOCAL_RETENTION_BYTES = 256 * 1024 * 1024
#: Production keeps a week, with no size cap.
PRODUCTION_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class KafkaConfig:
    """Where Kafka is and how topics are created."""

    bootstrap_servers: str = field(
        default_factory=lambda: env_str("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    )
    #: Start a local Apache Kafka node (``make run``); false where a cluster runs (compose).
    embedded: bool = field(default_factory=lambda: env_bool("KAFKA_EMBEDDED", True))
    partitions: int = field(default_factory=lambda: env_int("KAFKA_PARTITIONS", 3))
    replication_factor: int = field(default_factory=lambda: env_int("KAFKA_REPLICATION_FACTOR", 1))
    #: Topics' ``min.insync.replicas``: with ``acks=all`` a write is acknowledged once this
    #: many replicas hold it (a cluster of three: 2, so one broker may be lost).
    min_insync_replicas: int = field(
        default_factory=lambda: env_int("KAFKA_MIN_INSYNC_REPLICAS", 1)
    )
    #: Topics' ``retention.ms``, the only setting that differs by environment.
    retention_ms: int = field(
        default_factory=lambda: env_int(
            "KAFKA_RETENTION_MS",
            LOCAL_RETENTION_MS if env_bool("KAFKA_EMBEDDED", True) else PRODUCTION_RETENTION_MS,
        )
    )
    #: Topics' ``retention.bytes`` per partition (-1: no cap).
    retention_bytes: int = field(
        default_factory=lambda: env_int(
            "KAFKA_RETENTION_BYTES",
            LOCAL_RETENTION_BYTES if env_bool("KAFKA_EMBEDDED", True) else -1,
        )
    )
    topic_prefix: str = field(default_factory=lambda: env_str("KAFKA_TOPIC_PREFIX", ""))

    def __post_init__(self) -> None:
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise ValueError(
                f"KAFKA_MIN_INSYNC_REPLICAS={self.min_insync_replicas} must be between 1 and "
                f"KAFKA_REPLICATION_FACTOR={self.replication_factor}: with more, no write "
                "with acks=all could ever be acknowledged"
            )

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        return self.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]


def kafka_config() -> KafkaConfig:
    """Read the Kafka configuration now (tests change the environment between calls)."""
    return KafkaConfig()


def var_dir() -> Path:
    """The git-ignored folder for embedded-mode state (SQLite, checkpoints, logs)."""
    path = Path(env_str("ORDERTRACK_VAR_DIR", str(BASE_DIR / "var")))
    path.mkdir(parents=True, exist_ok=True)
    return path

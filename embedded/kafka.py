"""Apache Kafka on this machine: one KRaft node (broker and controller in one JVM).

``make run`` starts it through ``python -m embedded.kafka``; the test suite starts one
:class:`KafkaBroker` on free ports for the whole ``make test``; ``make run-prod`` runs
compose's ``kafka`` service with it. All of them run the jars of ``jvm/kafka/pom.xml``
(the version of compose's image) with ``jvm/kafka/server.properties``; only the
node's addresses and data folder are added here. The log lives on disk under
``var/kafka`` and survives restarts; retention bounds it (topic settings, see
:class:`contract.conf.KafkaConfig`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from contract.conf import kafka_config, var_dir
from embedded.lifetime import die_with_parent, refuse_taken_port
from jvm import maven

CONFIG_DIR = maven.JVM_DIR / "kafka"
#: Its own stdout's lines that tell start-up is over.
STARTED = "Kafka Server started"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_id() -> str:
    """16 random bytes, URL-safe base64 without padding (Kafka's format); never with a
    leading "-", which the storage tool's arguments would read as an option (Kafka's own
    ``Uuid.randomUuid`` draws again for the same reason)."""
    while True:
        found = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not found.startswith("-"):
            return found


@dataclass
class KafkaBroker:
    """One Apache Kafka node as a child process of this one (it dies with it)."""

    data_dir: Path
    port: int
    controller_port: int
    host: str = "127.0.0.1"
    heap: str = "512m"
    #: Where the broker's own log goes (None: this process's stdout).
    log_path: Path | None = None
    #: Extra ``server.properties`` lines (tests, the cluster override).
    overrides: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def fresh(
        cls, data_dir: Path, log_path: Path | None = None, port: int | None = None
    ) -> KafkaBroker:
        """A started node on free loopback ports (tests, benchmarks); a ``data_dir`` an
        earlier node used resumes its log."""
        return cls(
            data_dir=data_dir,
            port=port or free_port(),
            controller_port=free_port(),
            log_path=log_path,
        ).start()

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def properties(self) -> str:
        """``jvm/kafka/server.properties`` with this node's addresses and data folder."""
        local = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "log.dirs": str(self.data_dir / "log"),
            **self.overrides,
        }
        lines = [
            line
            for line in (CONFIG_DIR / "server.properties").read_text().splitlines()
            if line.partition("=")[0].strip() not in local
        ]
        return "\n".join([*lines, *(f"{k}={v}" for k, v in local.items())]) + "\n"

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        return [
            maven.java(),
            f"-Xms{heap}" if main == "kafka.Kafka" else "-Xms32m",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={CONFIG_DIR / 'log4j2.properties'}",
            "-cp",
            maven.classpath("kafka"),
            main,
            *args,
        ]

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Format the storage on first start, start the node, wait until it answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        config.write_text(self.properties())
        if not (self.data_dir / "log" / "meta.properties").exists():
            # Its own JVM: the storage tool calls exit. A node formatted once keeps its id.
            subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    "format",
                    "--ignore-formatted",
                    "--cluster-id",
                    _cluster_id(),
                    "--config",
                    str(config),
                ),
                check=True,
                capture_output=True,
            )
        out: IO[bytes] | int | None = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it open
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(config), heap=self.heap),
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            preexec_fn=die_with_parent(new_session=False),
        )
        if out is not None:
            out.close()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until the node answers a metadata request (it is then broker and controller)."""
        from contract.kafka import admin

        client = admin(_config_for(self.bootstrap_servers))
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"Kafka exited with code {self.process.returncode} while starting"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                if client.list_topics(timeout=2).brokers:
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Kafka did not answer on {self.bootstrap_servers} in {timeout:.0f}s"
                )
            time.sleep(0.3)

    def stop(self, timeout: float = 30.0) -> None:
        """A controlled shutdown (SIGTERM: the log is closed cleanly), then SIGKILL."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would (tests of recovery)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def rss_mb(self) -> int:
        if self.process is None:
            return 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
        return 0


def _config_for(bootstrap: str):  # noqa: ANN202 - a KafkaConfig
    from dataclasses import replace

    return replace(kafka_config(), bootstrap_servers=bootstrap)


def local_broker() -> KafkaBroker:
    """``make run``'s node: ``KAFKA_BOOTSTRAP_SERVERS``'s port, the controller on the
    next one (``KAFKA_CONTROLLER_PORT``), data under ``var/kafka``."""
    config = kafka_config()
    controller = int(os.environ.get("KAFKA_CONTROLLER_PORT") or config.port + 1)
    return KafkaBroker(
        data_dir=var_dir() / "kafka",
        port=config.port,
        controller_port=controller,
        host=config.host,
        heap=os.environ.get("KAFKA_HEAP", "512m"),
    )


def main() -> int:
    """Run the node in the foreground until SIGTERM/SIGINT; create the product's topics."""
    from contract.kafka import ensure_topics, retention_report

    broker = local_broker()
    for port in (broker.port, broker.controller_port):
        refuse_taken_port(port, "kafka")
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: stop.set())
    jars = maven.lib_dir("kafka")
    print(f"kafka: Apache Kafka {kafka_version()} (jars in {jars}) starting ...", flush=True)
    t0 = time.monotonic()
    broker.start()
    print(
        f"kafka: listening on {broker.bootstrap_servers} (controller :{broker.controller_port}); "
        f"data in {broker.data_dir / 'log'}; its log in var/logs/kafka.log "
        f"({time.monotonic() - t0:.1f}s)",
        flush=True,
    )
    created = ensure_topics()
    if created:
        print(f"kafka: created {len(created)} topics", flush=True)
    for line in retention_report(skip=created):
        print(f"kafka: {line}", flush=True)
    print("kafka: topics ready", flush=True)
    while not stop.wait(1.0):
        if broker.process is not None and broker.process.poll() is not None:
            print(f"kafka: the broker exited with code {broker.process.returncode}", flush=True)
            return broker.process.returncode or 1
    broker.stop()
    return 0


def kafka_version() -> str:
    """The broker's version, from the resolved ``kafka_2.13`` jar's name."""
    for jar in maven.jars("kafka"):
        if jar.name.startswith("kafka_2.13-"):
            return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())

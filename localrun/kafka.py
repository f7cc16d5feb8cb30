"""Apache Kafka on this machine: KRaft nodes, each broker and controller in one JVM.

``make run`` starts one through ``python -m localrun.kafka``; the test suite starts one
:class:`KafkaBroker` on free ports for the whole ``make test``; ``make run-prod`` runs
each of compose's Kafka services with it (three with docker-compose.cluster.yml), given
the settings the service's environment gives the image (:func:`image_properties`). All
of them run the jars of ``jvm/kafka/pom.xml`` (the version of compose's image) with
``jvm/kafka/server.properties``; only a node's addresses, quorum and data folder are
added here. The log lives on disk under ``var/kafka`` and survives restarts; retention
bounds it (topic settings, see :class:`runtime.conf.KafkaConfig`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from jvm import maven
from localrun.lifetime import die_with_parent, refuse_taken_port
from localrun.ports import free_port
from runtime.conf import kafka_config, var_dir

CONFIG_DIR = maven.JVM_DIR / "kafka"
#: Its own stdout's lines that tell start-up is over.
STARTED = "Kafka Server started"


#: Variables the apache/kafka image reads itself rather than turning into settings.
IMAGE_EXCLUDES = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL",
})  # fmt: skip


def image_properties(env: dict[str, str]) -> dict[str, str]:
    """The ``server.properties`` keys the apache/kafka image sets from a container's
    environment: ``KAFKA_`` dropped, lower case, ``_`` a dot, ``__`` an underscore, ``___``
    a dash (``KAFKA_NODE_ID`` is ``node.id``). So a compose service's settings apply here
    as they do in its container."""
    out = {}
    for name, value in env.items():
        if not name.startswith("KAFKA_") or name in IMAGE_EXCLUDES:
            continue
        key = re.sub(r"(?<!_)_(?!_)", ".", name.removeprefix("KAFKA_"))
        out[key.replace("___", "-").replace("__", "_").lower()] = value
    return out


def listener_ports(listeners: str) -> dict[str, int]:
    """``PLAINTEXT://127.0.0.1:19092,CONTROLLER://...:19093`` -> each listener's port."""
    return {
        name: int(address.rsplit(":", 1)[1])
        for name, _, address in (item.partition("://") for item in listeners.split(",") if item)
    }


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
    #: Extra ``server.properties`` lines (tests, the cluster override): ``node.id`` and
    #: ``controller.quorum.voters`` make it one node of a cluster.
    overrides: dict[str, str] = field(default_factory=dict)
    #: The cluster id its storage is formatted with (every node of a cluster: the same
    #: one; compose's ``CLUSTER_ID``); None draws one.
    cluster_id: str | None = None
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

    @classmethod
    def cluster(
        cls, data_dir: Path, count: int = 3, overrides: dict[str, str] | None = None
    ) -> list[KafkaBroker]:
        """``count`` nodes on free loopback ports forming one quorum (not started: see
        :func:`start_all`), each with ``overrides`` (e.g. a cluster's replication
        settings) and its data under ``data_dir/kafka-<id>``."""
        ports = [(free_port(), free_port()) for _ in range(count)]
        voters = ",".join(f"{n}@127.0.0.1:{c}" for n, (_, c) in enumerate(ports, 1))
        cluster_id = _cluster_id()
        return [
            cls(
                data_dir=data_dir / f"kafka-{n}",
                port=port,
                controller_port=controller,
                log_path=data_dir / f"kafka-{n}.log",
                overrides={
                    **(overrides or {}),
                    "node.id": str(n),
                    "controller.quorum.voters": voters,
                },
                cluster_id=cluster_id,
            )
            for n, (port, controller) in enumerate(ports, 1)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def node_id(self) -> int:
        return int(self.overrides.get("node.id", "1"))

    def properties(self) -> str:
        """``jvm/kafka/server.properties`` with this node's addresses and data folder."""
        local = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
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
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Format the storage on first start and start the JVM, without waiting (a node
        of a cluster answers only once a majority of the quorum runs)."""
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
                    self.cluster_id or _cluster_id(),
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

    def wait_ready(self, timeout: float = 90.0, brokers: int = 1) -> None:
        """Until the node answers a metadata request listing at least ``brokers`` brokers
        (it is then a broker of a cluster whose controllers have a leader)."""
        from runtime.kafka import admin

        client = admin(_config_for(self.bootstrap_servers))
        deadline = time.monotonic() + timeout
        found = 0
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"Kafka exited with code {self.process.returncode} while starting"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                found = len(client.list_topics(timeout=2).brokers)
                if found >= brokers:
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Kafka did not answer on {self.bootstrap_servers} in {timeout:.0f}s"
                    + (f" with {brokers} brokers (it saw {found})" if brokers > 1 else "")
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


def start_all(brokers: list[KafkaBroker], timeout: float = 120.0) -> list[KafkaBroker]:
    """Start the nodes of one cluster together, and wait until each sees all of them."""
    try:
        for broker in brokers:
            broker.launch()
        for broker in brokers:
            broker.wait_ready(timeout, brokers=len(brokers))
    except BaseException:
        for broker in brokers:
            broker.stop()
        raise
    return brokers


def _config_for(bootstrap: str):  # noqa: ANN202 - a KafkaConfig
    from dataclasses import replace

    return replace(kafka_config(), bootstrap_servers=bootstrap)


def local_broker(
    data_dir: Path | None = None,
    overrides: dict[str, str] | None = None,
    cluster_id: str | None = None,
) -> KafkaBroker:
    """The launcher's node. ``make run``'s: ``KAFKA_BOOTSTRAP_SERVERS``'s port, the
    controller on the next one (``KAFKA_CONTROLLER_PORT``), data under ``var/kafka``.
    ``make run-prod``'s: the ports of its ``listeners`` override, data in ``data_dir``."""
    config = kafka_config()
    overrides = overrides or {}
    ports = listener_ports(overrides.get("listeners", ""))
    return KafkaBroker(
        data_dir=data_dir or var_dir() / "kafka",
        port=ports.get("PLAINTEXT", config.port),
        controller_port=ports.get("CONTROLLER")
        or int(os.environ.get("KAFKA_CONTROLLER_PORT") or config.port + 1),
        host=config.host,
        heap=os.environ.get("KAFKA_HEAP", "512m"),
        overrides=overrides,
        cluster_id=cluster_id,
    )


def launcher_node(argv: list[str]) -> KafkaBroker:
    """The node ``python -m localrun.kafka ARGS`` runs (not started)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m localrun.kafka", description=__doc__)
    parser.add_argument("--data-dir", type=Path, help="the node's folder (default var/kafka)")
    parser.add_argument("--cluster-id", help="the id its storage is formatted with")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="a server.properties setting of this node (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.override)
    return local_broker(args.data_dir, overrides, args.cluster_id)


def main(argv: list[str] | None = None) -> int:
    """Run the node in the foreground until SIGTERM/SIGINT; create the product's topics
    once the cluster has a broker for each replica (``KAFKA_REPLICATION_FACTOR``)."""
    from runtime.kafka import ensure_topics, retention_report

    broker = launcher_node(sys.argv[1:] if argv is None else argv)
    for port in (broker.port, broker.controller_port):
        refuse_taken_port(port, "kafka")
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: stop.set())
    from localrun.console import debug_console

    if not debug_console():  # the broker's thousands of INFO lines: a file, not the console
        broker.log_path = var_dir() / "logs" / f"{broker.data_dir.name}-jvm.log"
    jars = maven.lib_dir("kafka")
    print(
        f"kafka: Apache Kafka {kafka_version()} (jars in {jars}), node {broker.node_id}, "
        f"starting; its log: {broker.log_path or 'here'}",
        flush=True,
    )
    t0 = time.monotonic()
    try:
        broker.start()
    except (RuntimeError, TimeoutError) as exc:
        from localrun.supervisor import log_tail

        print(f"kafka: {exc}", flush=True)
        for line in log_tail(broker.log_path) if broker.log_path else []:
            print(f"kafka:   {line}", flush=True)  # why, for the supervisor's report
        broker.stop()
        return 1
    print(
        f"kafka: listening on {broker.bootstrap_servers} (controller :{broker.controller_port}); "
        f"data in {broker.data_dir / 'log'} ({time.monotonic() - t0:.1f}s)",
        flush=True,
    )
    replicas = kafka_config().replication_factor
    if replicas > 1:  # the topics' replicas need that many brokers to be created
        broker.wait_ready(timeout=180, brokers=replicas)
        print(f"kafka: {replicas} brokers up", flush=True)
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

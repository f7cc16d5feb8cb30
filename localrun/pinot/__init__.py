"""Apache Pinot as local JVM processes, for ``make run`` and the tests.

Three JVMs from ``var/jvm/pinot/lib`` (jvm/pinot/pom.xml, Pinot 0.11.0 on JDK 17):

* ``zookeeper``: ZooKeeper from Pinot's jars, on 127.0.0.1 (cluster state;
  jvm/pinot/zookeeper.cfg);
* ``controller-broker``: controller and broker in one JVM (``StartServiceManager``);
* ``server``: the server alone, so a test can kill -9 it and restart it; a replicated
  cluster (``PINOT_EXTRA_SERVER_PORTS``: docker-compose.cluster.yml's second server under
  ``make run-prod``) runs ``server-2``... beside it, each in its own JVM and folder.

Their data (ZooKeeper's snapshots, the controller's completed segments, the server's
segments) stays under ``data_dir`` (``var/pinot`` for ``make run``) across restarts;
the tables' retention (set by pinot/loader.py) bounds it. Settings for a 2-core machine
are in jvm/pinot/*.properties. Every JVM gets the parent-death signal, so none outlives
the Python process that started it.

``python -m localrun.pinot`` runs it in the foreground, loads the tables and prints
``pinot: ready``; SIGTERM or Ctrl-C stops it gracefully: it first commits the tables'
consuming segments (localrun/pinot/commit.py: Kafka's byte cap may have deleted where
they start), then stops the JVMs, within :data:`STOP_TIMEOUT`.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from jvm import maven
from localrun.lifetime import die_with_parent
from localrun.pinot.commit import CommitReport, commit_consuming
from localrun.pinot.conf import (
    Ports,
    broker_conf,
    controller_conf,
    every_interface,
    jvm_command,
    server_conf,
    service_manager_args,
    zookeeper_args,
)
from pinot import loader
from pinot.definitions import load_tables
from pinot.deployment import check_flush_time
from runtime.conf import env_int, kafka_config, var_dir

log = logging.getLogger(__name__)

#: How long a graceful stop waits for the consuming segments' commit; then it stops anyway.
COMMIT_TIMEOUT = 60.0
#: A graceful stop's whole budget (the supervisor's wait before it kills the component):
#: the commit, then each JVM's stop (about 5 s each: docs/pinot.md).
STOP_TIMEOUT = COMMIT_TIMEOUT + 40.0


class PinotError(RuntimeError):
    """Pinot did not start, or a table could not be loaded."""


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class LocalPinot:
    """ZooKeeper, controller + broker, and a server, as local JVMs over one data folder."""

    def __init__(
        self,
        data_dir: Path | None = None,
        ports: Ports | None = None,
        kafka_bootstrap: str | None = None,
        topic_prefix: str | None = None,
        kafka_retention_ms: int | None = None,
        retention_days: int = 3,
    ) -> None:
        kafka = kafka_config()
        self.data_dir = Path(data_dir or var_dir() / "pinot")
        self.ports = ports or Ports.from_env()
        self.settings = loader.Settings(
            controller_url=f"http://127.0.0.1:{self.ports.controller}",
            kafka_bootstrap=kafka_bootstrap or kafka.bootstrap_servers,
            topic_prefix=kafka.topic_prefix if topic_prefix is None else topic_prefix,
            kafka_retention_ms=kafka_retention_ms or kafka.retention_ms,
            retention_days=retention_days,
        )
        self.log_dir = self.data_dir / "logs"
        #: The running server's pid, rewritten at each start (for a kill from another process).
        self.server_pidfile = self.data_dir / "server.pid"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.outcomes: list[loader.Outcome] = []
        self._lock = threading.RLock()
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ addresses

    @property
    def controller_url(self) -> str:
        return self.settings.controller_url

    @property
    def broker_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.broker}"

    @property
    def server_admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.server_admin}"

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        command = jvm_command(name, self.log_dir, args)
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 (the child holds it)
        # In the launcher's process group (a signal to the component reaches them);
        # SIGTERM when the launcher ends, however it ends.
        dies_with_launcher = die_with_parent(new_session=False)

        def preexec() -> None:
            # Ctrl-C in a terminal reaches the whole group; it is the launcher's to act on
            # (it commits the consuming segments, then stops the JVMs), so the JVMs ignore
            # SIGINT (a JVM leaves an ignored SIGINT ignored) and stop on SIGTERM.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            dies_with_launcher()

        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                preexec_fn=preexec,
            )
        finally:
            out.close()
        self.processes[name] = process
        return process

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        process = self.processes[name]
        while not ready():
            if self._stopping.is_set():
                raise PinotError(f"Pinot {name}: stopped while starting")
            if process.poll() is not None:
                raise PinotError(
                    f"Pinot {name} exited with {process.returncode} during start-up: "
                    f"see {self.log_dir / name}.log and .out"
                )
            if time.monotonic() > deadline:
                raise PinotError(
                    f"Pinot {name} not ready after {timeout:.0f} s: see {self.log_dir}"
                )
            time.sleep(0.25)

    def _start_server(self, timeout: float, name: str = "server") -> None:
        conf = server_conf(self.data_dir, self.ports, name)
        process = self._spawn(name, service_manager_args(self.ports, conf))
        (self.data_dir / f"{name}.pid").write_text(f"{process.pid}\n")
        _, admin = self.ports.servers()[name]
        health = f"http://127.0.0.1:{admin}/health/readiness"
        self._wait(name, lambda: _answers(health), timeout)

    def start(self, load: bool = True, timeout: float = 120.0) -> LocalPinot:
        """Start the three JVMs in order, each ready before the next; then load the tables
        (pinot/loader.py) and wait until each answers a query without exceptions."""
        self._stopping.clear()
        tables = load_tables()
        for table in tables.values():  # refuse a flush time past Kafka's retention first
            check_flush_time(table, self.settings)
        for folder in ("conf", "logs", "zookeeper", "controller", *self.ports.servers()):
            (self.data_dir / folder).mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            self._spawn("zookeeper", zookeeper_args(self.data_dir, self.ports))
            self._wait("zookeeper", lambda: _listens(self.ports.zookeeper), 30)
            controller = controller_conf(self.data_dir, self.ports)
            broker = broker_conf(self.data_dir, self.ports)
            self._spawn("controller-broker", service_manager_args(self.ports, controller, broker))
            remaining = max(10.0, deadline - time.monotonic())
            self._wait(
                "controller-broker", lambda: _answers(f"{self.controller_url}/health"), remaining
            )
            # The servers join a cluster the controller has set up (else Helix refuses
            # them), all before the tables exist: each table's replicas go to those there.
            for name in self.ports.servers():
                self._start_server(max(10.0, deadline - time.monotonic()), name)
            self._wait(
                "controller-broker",
                lambda: _answers(f"{self.broker_url}/health"),
                max(10.0, deadline - time.monotonic()),
            )
            if load:
                self.load_tables(max(10.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def load_tables(self, timeout: float = 60.0) -> list[loader.Outcome]:
        """Create or update the tables, then wait until every one answers queries."""
        try:
            self.outcomes = loader.load(self.settings)
            loader.wait_queryable(self.broker_url, [o.table for o in self.outcomes], timeout)
        except loader.LoaderError as exc:
            raise PinotError(str(exc)) from exc
        return self.outcomes

    def commit_consuming(self, timeout: float = COMMIT_TIMEOUT) -> CommitReport:
        """Commit the consuming segments of the tables this process loaded, so a restart
        over this data folder re-reads Kafka only from where they end (a graceful stop,
        before :meth:`stop`; the tests' fixtures stop or kill without it)."""
        tables = [outcome.table for outcome in self.outcomes]
        return commit_consuming(self.controller_url, self.broker_url, tables, timeout)

    def _end(self, name: str, timeout: float) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("Pinot %s did not stop within %.0f s: killed", name, timeout)
            process.kill()
            process.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM each JVM (server first, ZooKeeper last), SIGKILL after ``timeout``."""
        self._stopping.set()
        with self._lock:
            for name in (*self.ports.servers(), "controller-broker", "zookeeper"):
                self._end(name, timeout)

    def keep_server_up(self, every: float = 0.5, timeout: float = 120.0) -> threading.Thread:
        """Restart a server whenever it dies (as a cluster manager would restart a lost
        server): it reloads its completed segments from disk and re-consumes its
        consuming ones from Kafka, while ZooKeeper, the controller, the broker and the
        other servers stay. Not while ``<data_dir>/<server>.hold`` exists (a drill)."""

        def watch() -> None:
            while not self._stopping.wait(every):
                with self._lock:
                    for name in self.ports.servers():
                        server = self.processes.get(name)
                        if self._stopping.is_set() or server is None or server.poll() is None:
                            continue
                        if (self.data_dir / f"{name}.hold").exists():  # a drill holds it down
                            continue
                        log.warning(
                            "Pinot %s exited with %s: restarting it", name, server.returncode
                        )
                        try:
                            self._start_server(timeout, name)
                        except PinotError as exc:
                            log.error("Pinot %s did not come back: %s", name, exc)
                            time.sleep(5)  # and try again, never in a tight loop

        thread = threading.Thread(target=watch, name="pinot-server-watch", daemon=True)
        thread.start()
        return thread

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.items() if p.poll() is None}

    def __enter__(self) -> LocalPinot:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    """``python -m localrun.pinot``: run Pinot in the foreground until SIGTERM or Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s pinot %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per readiness poll
    pinot = LocalPinot(retention_days=env_int("PINOT_RETENTION_DAYS", 3))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    ports = pinot.ports
    servers = ", ".join(
        f"{name} {netty} (admin {admin})" for name, (netty, admin) in ports.servers().items()
    )
    print(
        f"pinot: {loader.PINOT_VERSION}, controller {pinot.controller_url}, "
        f"broker {pinot.broker_url}, {servers}, zookeeper 127.0.0.1:{ports.zookeeper}",
        flush=True,
    )
    print(f"pinot: data in {pinot.data_dir}, logs in {pinot.log_dir}", flush=True)
    log.warning(
        "the server query port(s) %s listen on every interface (Pinot 0.11 takes no address "
        "for them): keep them behind a firewall (docs/operations.md, security checklist)",
        ", ".join(map(str, every_interface(ports))),
    )
    started = time.monotonic()
    try:
        pinot.start(timeout=120.0 + 60.0 * len(ports.extra_servers))  # each server in turn
    except (PinotError, maven.MavenError, loader.LoaderError) as exc:
        print(f"pinot: {exc}", file=sys.stderr, flush=True)
        return 1
    for outcome in pinot.outcomes:
        print(f"pinot: {outcome}", flush=True)
    print(f"pinot: ready ({time.monotonic() - started:.1f} s, pids {pinot.pids()})", flush=True)
    pinot.keep_server_up()
    while not done.wait(1.0):
        gone = [
            name
            for name, p in pinot.processes.items()
            if name not in ports.servers() and p.poll() is not None
        ]
        if gone:
            print(f"pinot: {', '.join(gone)} exited: see {pinot.log_dir}", file=sys.stderr)
            pinot.stop()
            return 1
    print(f"pinot: committing the consuming segments (up to {COMMIT_TIMEOUT:.0f} s)", flush=True)
    say_commit(pinot.commit_consuming(COMMIT_TIMEOUT))
    pinot.stop()
    print("pinot: stopped", flush=True)
    return 0


def say_commit(report: CommitReport) -> None:
    """One line per table; a warning for each table or segment left uncommitted, which a
    restart re-reads from Kafka (where the byte cap may have deleted its start)."""
    for table, segments in report.committed.items():
        print(f"pinot: {table}: committed {', '.join(segments)}", flush=True)
    for table, why in report.skipped.items():
        print(f"pinot: {table}: nothing to commit: {why}", flush=True)
    for table, why in report.failed.items():
        log.warning("%s: consuming segments not committed: %s", table, why)
    if report.pending:
        log.warning(
            "not committed within %.0f s: %s",
            report.seconds,
            ", ".join(f"{segment} ({status})" for segment, status in report.pending.items()),
        )
    print(f"pinot: commit done in {report.seconds:.1f} s", flush=True)

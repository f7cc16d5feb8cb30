"""``make run`` listens on loopback only (issue 69, N2): every TCP socket that any process
of the running system listens on, found through the process tree, is on 127.0.0.0/8 or
::1, except what :data:`ALLOWED` names with the reason it has no supported fix.

The system is ``python -m localrun``, the command ``make run`` runs (with free ports and
a folder of its own), so the check covers the code path an operator runs: the Kafka
node, Pinot's ZooKeeper, controller, broker and server JVMs, the web, the relay, the
stream job's Spark driver and the simulator. A listener is found by the socket inodes in
each process's ``/proc/PID/fd`` matched against ``/proc/net/tcp`` and ``tcp6``: no
reliance on ``ss`` or on truncated process names.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localrun.kafka import free_port
from localrun.pinot_conf import free_ports_env

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]
#: ``make run`` up: Kafka, Pinot (about a minute of both cores), the stream job's warm-up.
READY_TIMEOUT = 300.0
READY_TEXT = "Ordertrack is ready."
#: The supervisor's graceful stop (Pinot commits its consuming segments first).
STOP_TIMEOUT = 150.0

#: (process, port variable) -> why it may listen beyond loopback. Only what has no
#: supported setting: Pinot 0.11's server binds its query port with Netty's
#: ``bind(port)`` (pinot-core QueryServer), and ``pinot.server.netty.host`` is only the
#: name it registers in Helix. docs/operations.md's checklist says so.
ALLOWED = {
    ("pinot server", "PINOT_SERVER_PORT"): "Pinot 0.11's QueryServer binds every interface",
}


@dataclass(frozen=True)
class Listener:
    pid: int
    who: str
    address: str
    port: int
    loopback: bool

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.who:<24} pid {self.pid:<7} {host}:{self.port}"


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address of /proc/net/tcp{,6}: 32-bit words in the host's byte order."""
    raw = bytes.fromhex(hex_address)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def listening_inodes() -> dict[int, tuple[str, int, bool]]:
    """Socket inode -> (address, port, loopback) of every TCP socket in LISTEN state."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            address = _address(hex_address)
            found[int(fields[9])] = (str(address), int(hex_port, 16), address.is_loopback)
    return found


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid, whatever their session)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def describe(pid: int) -> str:
    """Which part of the system a process is, from its whole command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return "?"
    for arg in argv:
        if arg.startswith("-Dpinot.component="):
            return "pinot " + arg.split("=", 1)[1]
    if "org.apache.spark.deploy.SparkSubmit" in argv:
        return "spark driver"
    if any("kafka.Kafka" in arg or "KafkaRaftServer" in arg for arg in argv):
        return "kafka node"
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        return "python -m " + argv[argv.index("-m") + 1]
    script = next((a for a in argv if a.endswith("manage.py")), None)
    if script is not None and argv.index(script) + 1 < len(argv):
        return "manage.py " + argv[argv.index(script) + 1]
    return Path(argv[0]).name


def listeners(root: int) -> list[Listener]:
    """Every listening TCP socket held by ``root`` or a process below it."""
    inodes = listening_inodes()
    out = []
    for pid in descendants(root):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        seen = set()
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if not target.startswith("socket:["):
                continue
            inode = int(target[len("socket:[") : -1])
            if inode in inodes and inode not in seen:
                seen.add(inode)
                address, port, loopback = inodes[inode]
                out.append(Listener(pid, describe(pid), address, port, loopback))
    return sorted(out, key=lambda item: (item.who, item.port))


def _started(pid: int) -> str | None:
    """A process's start time (field 22 of its stat): the same pid and start time is the
    same process, so a pid reused since is never killed."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _stop(process: subprocess.Popen[bytes], tree: dict[int, str | None]) -> None:
    """SIGTERM as an operator's Ctrl-C would; then kill what is left of the tree."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT)
    tree = {**tree, **{pid: _started(pid) for pid in descendants(process.pid)}}
    for pid, started in tree.items():
        if started is not None and _started(pid) == started and pid != process.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if process.poll() is None:
        process.kill()
    process.wait()


@pytest.fixture(scope="module")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """``python -m localrun`` (what ``make run`` runs) on free ports, up and ready."""
    tmp = tmp_path_factory.mktemp("listening")
    env = {
        **os.environ,
        "DJANGO_DEBUG": "true",  # as the Makefile's run target
        "ORDERTRACK_VAR_DIR": str(tmp),
        "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "KAFKA_TOPIC_PREFIX": "",
        "KAFKA_EMBEDDED": "true",
        **free_ports_env(),
        "STREAMING_CHECKPOINT_DIR": str(tmp / "checkpoint"),
        "WEB_PORT": str(free_port()),
        "RELAY_METRICS_PORT": str(free_port()),
        "STREAMING_METRICS_PORT": str(free_port()),
        "PUSH_BRIDGE_METRICS_PORT": str(free_port()),
        "SIMULATOR_RATE": "5",  # some input for the stream job, little CPU
    }
    # The defaults make run has on a plain shell: no outside servers, nothing preset.
    for key in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR", "SPARK_LOCAL_IP"):
        env.pop(key, None)
    log_path = tmp / "make-run.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "localrun"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    tree: dict[int, str | None] = {}
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while READY_TEXT not in log_path.read_text(errors="replace"):
            tail = log_path.read_text(errors="replace")[-3000:]
            assert process.poll() is None, f"make run exited {process.returncode}:\n{tail}"
            assert time.monotonic() < deadline, f"not ready in {READY_TIMEOUT:.0f} s:\n{tail}"
            time.sleep(1)
        tree = {pid: _started(pid) for pid in descendants(process.pid)}
        yield {"pid": process.pid, "env": env, "log": log_path}
    finally:
        _stop(process, tree)


def test_make_run_listens_on_loopback_only(make_run: dict) -> None:
    found = listeners(make_run["pid"])
    table = "\n".join(map(str, found))
    print(f"\nlistening sockets of make run:\n{table}")
    env = make_run["env"]
    ports = {int(env[v]) for v in ("PINOT_ZOOKEEPER_PORT", "PINOT_SERVER_PORT", "WEB_PORT")}
    assert ports <= {item.port for item in found}, f"the walk missed known listeners:\n{table}"

    allowed = {(who, int(env[variable])) for who, variable in ALLOWED}
    exposed = [item for item in found if not item.loopback and (item.who, item.port) not in allowed]
    assert not exposed, "listening beyond loopback:\n" + "\n".join(map(str, exposed))
    stale = allowed - {(item.who, item.port) for item in found if not item.loopback}
    assert not stale, f"allow-listed but on loopback now (drop from ALLOWED): {stale}"

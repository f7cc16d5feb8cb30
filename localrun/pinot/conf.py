"""How each local Pinot JVM is started: its ports, its command line and its properties.

The checked-in files (jvm/pinot/*.properties: settings for a 2-core machine) are the base;
a run adds what only it knows (its ports, ZooKeeper's address, its data folders) and
writes the result under ``<data_dir>/conf``. Kept apart from the launcher
(localrun/pinot/), which only starts, watches and stops the processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jvm import maven
from localrun.ports import free_port
from runtime.conf import env_int, env_list

CONF_DIR = maven.JVM_DIR / "pinot"
CLUSTER = "ordertrack"
ADMIN_MAIN = "org.apache.pinot.tools.admin.PinotAdministrator"
#: ZooKeeper's own server, from the same jars: unlike Pinot's StartZookeeper it reads a
#: config file, which can bind its client port to loopback (jvm/pinot/zookeeper.cfg).
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
#: Each JVM's main class by name (the others run Pinot's admin tool).
MAINS = {"zookeeper": ZOOKEEPER_MAIN}

#: What Pinot's own launcher opens on JDK > 11 (its off-heap buffers and reflection).
ADD_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("java.nio", "sun.nio.ch", "java.lang", "java.util", "java.lang.reflect")
]
#: Two cores: fewer GC and JIT threads than the JVM would pick for a bigger machine.
JVM_COMMON = [
    "-XX:+UseG1GC",
    "-XX:ParallelGCThreads=2",
    "-XX:ConcGCThreads=1",
    "-XX:CICompilerCount=2",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
]
#: Helix's ZooKeeper session for the controller, broker and server (Helix's default: 30 s).
#: A restarted instance finds its dead predecessor's live-instance node and sleeps this
#: long plus 5 s for it to expire (helix ParticipantManager): after a kill -9 of the
#: server, and after any restart of the whole Pinot (ZooKeeper restores the old sessions
#: from its snapshot). 10 s: a restart waits 15 s instead of 35, and the controller sees a
#: dead server 20 s sooner; ZooKeeper's floor is 2 ticks (6 s: jvm/pinot/zookeeper.cfg),
#: and a client gives up a connection only after 2/3 of it without an answer.
HELIX_SESSION_TIMEOUT_MS = 10_000
#: Heaps (measured RSS in docs/pinot.md). Consuming segments are off-heap (server.properties).
HEAPS = {"zookeeper": "64m", "controller-broker": "384m", "server": "512m"}


@dataclass(frozen=True)
class Ports:
    """Where each part listens: on 127.0.0.1, except the servers' Netty ports, which
    Pinot 0.11 binds on every interface (no setting takes an address for them:
    :func:`every_interface`)."""

    zookeeper: int = 2181
    controller: int = 9000
    broker: int = 8099
    server: int = 8098  # the broker-to-server (Netty) port
    server_admin: int = 8097
    #: Further servers' (Netty, admin) ports: ``PINOT_EXTRA_SERVER_PORTS=8198:8197,...``.
    extra_servers: tuple[tuple[int, int], ...] = ()

    @classmethod
    def from_env(cls) -> Ports:
        pairs = (item.split(":") for item in env_list("PINOT_EXTRA_SERVER_PORTS", []))
        return cls(
            zookeeper=env_int("PINOT_ZOOKEEPER_PORT", 2181),
            controller=env_int("PINOT_CONTROLLER_PORT", 9000),
            broker=env_int("PINOT_BROKER_PORT", 8099),
            server=env_int("PINOT_SERVER_PORT", 8098),
            server_admin=env_int("PINOT_SERVER_ADMIN_PORT", 8097),
            extra_servers=tuple((int(netty), int(admin)) for netty, admin in pairs),
        )

    def servers(self) -> dict[str, tuple[int, int]]:
        """Each server's name (its JVM, folder and config) -> (Netty port, admin port)."""
        extra = {f"server-{n}": ports for n, ports in enumerate(self.extra_servers, 2)}
        return {"server": (self.server, self.server_admin), **extra}


def every_interface(ports: Ports) -> list[int]:
    """The ports that listen beyond loopback: each server's query (Netty) port, which
    Pinot 0.11's QueryServer binds with Netty's ``bind(port)``; ``pinot.server.netty.host``
    is only the name the server registers in Helix. A firewall must keep them in."""
    return [netty for netty, _ in ports.servers().values()]


def free_ports_env() -> dict[str, str]:
    """The environment of a ``make run``-like system whose Pinot (the ``pinot``
    component) listens on free ports: its four listeners, and where the web reads it
    (tests and benchmarks that run a whole system beside others)."""
    names = ("ZOOKEEPER", "CONTROLLER", "BROKER", "SERVER", "SERVER_ADMIN")
    ports = {name: free_port() for name in names}
    return {
        "PINOT_EMBEDDED": "true",
        **{f"PINOT_{name}_PORT": str(port) for name, port in ports.items()},
        "PINOT_BROKER_URL": f"http://127.0.0.1:{ports['BROKER']}",
        "PINOT_CONTROLLER_URL": f"http://127.0.0.1:{ports['CONTROLLER']}",
    }


def jvm_command(name: str, log_dir: Path, args: list[str]) -> list[str]:
    """The command line of the JVM ``name``: its heap by role, its main class
    (:data:`MAINS`, else Pinot's admin tool) and ``args``."""
    heap = HEAPS["server" if name.startswith("server") else name]
    return [
        maven.java(),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *JVM_COMMON,
        *ADD_OPENS,
        f"-Dlog4j2.configurationFile={CONF_DIR / 'log4j2.xml'}",
        f"-DLOG_ROOT={log_dir}",
        f"-Dpinot.component={name}",
        *([] if name in MAINS else [f"-Dzk.session.timeout={HELIX_SESSION_TIMEOUT_MS}"]),
        "-cp",
        maven.classpath("pinot"),
        MAINS.get(name, ADMIN_MAIN),
        *args,
    ]


def zookeeper_args(data_dir: Path, ports: Ports) -> list[str]:
    """ZooKeeperServerMain's arguments: its config file, written for this run."""
    return [str(zookeeper_conf(data_dir, ports))]


def zookeeper_conf(data_dir: Path, ports: Ports) -> Path:
    """ZooKeeper's config: its client port on 127.0.0.1 only, its data where
    StartZookeeper kept it (``<data_dir>/zookeeper``, snapshots and transaction logs)."""
    return _write_conf(
        data_dir / "conf" / "zookeeper.cfg",
        "zookeeper.cfg",
        {
            "clientPort": ports.zookeeper,
            "clientPortAddress": "127.0.0.1",
            "dataDir": data_dir / "zookeeper",
        },
    )


def service_manager_args(ports: Ports, *configs: Path) -> list[str]:
    """Pinot's service manager starting the roles of ``configs`` in one JVM."""
    return [
        "StartServiceManager",
        "-zkAddress",
        f"127.0.0.1:{ports.zookeeper}",
        "-clusterName",
        CLUSTER,
        "-port",
        "-1",  # no service-manager admin API
        "-bootstrapConfigPaths",
        *map(str, configs),
    ]


def _write_conf(path: Path, base: str, extra: dict[str, object]) -> Path:
    lines = (CONF_DIR / base).read_text().rstrip("\n")
    lines += "\n\n# Set by localrun/pinot/conf.py for this run\n"
    lines += "".join(f"{key}={value}\n" for key, value in extra.items())
    path.write_text(lines)
    return path


def _loopback(namespace: str, port: int) -> dict[str, object]:
    """An HTTP listener on 127.0.0.1 only (Pinot binds 0.0.0.0 by default, which would put
    the controller's admin API on the machine's network)."""
    return {
        f"{namespace}.access.protocols": "http",
        f"{namespace}.access.protocols.http.host": "127.0.0.1",
        f"{namespace}.access.protocols.http.port": port,
    }


def server_conf(data_dir: Path, ports: Ports, name: str) -> Path:
    """Server ``name``'s properties: its ports, and its segments in a folder of its own."""
    netty, admin = ports.servers()[name]
    folder = data_dir / name
    return _write_conf(
        data_dir / "conf" / f"{name}.properties",
        "server.properties",
        {
            "pinot.zk.server": f"127.0.0.1:{ports.zookeeper}",
            "pinot.cluster.name": CLUSTER,
            "pinot.server.netty.port": netty,
            "pinot.server.adminapi.port": admin,
            **_loopback("pinot.server.adminapi", admin),
            "pinot.server.instance.dataDir": folder / "index",
            "pinot.server.instance.segmentTarDir": folder / "tar",
            "pinot.server.instance.consumerDir": folder / "consumer",
        },
    )


def controller_conf(data_dir: Path, ports: Ports) -> Path:
    """The controller's properties: its port, ZooKeeper, and where completed segments go."""
    return _write_conf(
        data_dir / "conf" / "controller.properties",
        "controller.properties",
        {
            "controller.port": ports.controller,
            **_loopback("controller", ports.controller),
            "controller.vip.port": ports.controller,
            "controller.zk.str": f"127.0.0.1:{ports.zookeeper}",
            "controller.data.dir": data_dir / "controller" / "segments",
            "controller.local.temp.dir": data_dir / "controller" / "tmp",
        },
    )


def broker_conf(data_dir: Path, ports: Ports) -> Path:
    """The broker's properties: its query port and ZooKeeper."""
    return _write_conf(
        data_dir / "conf" / "broker.properties",
        "broker.properties",
        {
            "pinot.zk.server": f"127.0.0.1:{ports.zookeeper}",
            "pinot.cluster.name": CLUSTER,
            "pinot.broker.client.queryPort": ports.broker,
            **_loopback("pinot.broker.client", ports.broker),
        },
    )

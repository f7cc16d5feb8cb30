"""What ``make run-prod`` runs: each compose service as a local process (the plan).

Nothing here restates the compose files: :func:`plan` reads them (localrun/compose/file.py)
and turns each service into a local process with *its* command line and *its*
environment, changing only addresses: a compose host name becomes ``127.0.0.1`` and a
port a free local one, a named volume a folder under the run's ``var`` folder. Where a
service runs more than once (docker-compose.cluster.yml's ``kafka-2``, ``web-2``...,
each extending the main file's service), every instance gets ports and a data folder of
its own; the first keeps the single-node run's.

Its ports (localrun/compose/ports.py) are kept in the run's folder and taken again next
time while free.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localrun.compose.file import COMPOSE_FILE, load_project, service_env
from localrun.compose.ports import Ports
from localrun.kafka import image_properties, listener_ports
from runtime.conf import BASE_DIR

#: Compose services this machine cannot run (images), and the local process standing in
#: (by role: ``kafka-2`` is a ``kafka``, ``pinot-server-2`` a ``pinot-server``).
STAND_INS: dict[str, str | None] = {
    "kafka": "kafka",
    "pinot-broker": "pinot",
    "pinot-controller": None,
    "pinot-server": None,  # every server runs under python -m localrun.pinot
    "pinot-init": None,  # python -m localrun.pinot runs the same loader
    "zookeeper": None,
    "proxy": None,  # TLS termination: run only in front of several web processes
    "prometheus": None,  # scrapes the others; tests/system/pipeline/test_pipeline_health.py runs it on its own
}
#: Services that run once and must succeed before the application starts.
ONE_SHOTS = ("kafka-topics", "migrate")
#: Roles compose runs from the application image, started here with their own command.
APP_COMMANDS = (
    "spark-master", "spark-worker", "relay", "pushbridge", "notifier", "web", "simulator"
)  # fmt: skip


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class Plan:
    """Every local process of the production-like run, in compose's terms."""

    var: Path
    ports: Ports
    variables: dict[str, str]
    services: dict[str, Any]  # the interpolated, merged compose services
    #: compose service -> (argv, env) of its local process
    processes: dict[str, tuple[list[str], dict[str, str]]]
    one_shots: dict[str, tuple[list[str], dict[str, str]]]
    #: compose service -> the service it extends (itself when none): what it is run as
    roles: dict[str, str] = field(default_factory=dict)
    mapping: dict[str, str] = field(default_factory=dict)
    #: process -> what it listens on, for the operator (``python -m localrun.compose``)
    addresses: dict[str, str] = field(default_factory=dict)

    def address_map(self) -> dict[str, str]:
        return self.mapping

    def role(self, name: str) -> str:
        return self.roles.get(name, name)

    @property
    def proxied(self) -> bool:
        """Several web processes behind the proxy (TLS from its local CA), or uvicorn."""
        return "proxy" in self.processes

    @property
    def public_url(self) -> str:
        scheme = "https" if self.proxied else "http"
        return f"{scheme}://localhost:{self.ports.web}"

    @property
    def ca_file(self) -> Path | None:
        """The proxy's local CA certificate (Caddy's, for ``localhost``), to verify it by."""
        if not self.proxied:
            return None
        return self.var / "caddy" / "data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"

    def stand_ins(self) -> dict[str, str | None]:
        """Compose services not run as a process of their own, and what stands in."""
        run = set(self.processes) | set(self.one_shots)
        return {
            name: STAND_INS[self.role(name)]
            for name in self.services
            if name not in run and self.role(name) in STAND_INS
        }


#: Where a container listens to be reached over compose's network (``METRICS_HOST`` for
#: Prometheus); on one machine that is the machine's network, so it becomes loopback.
WILDCARD = "0.0.0.0"


def localise(value: str, mapping: dict[str, str]) -> str:
    """``value`` with its compose addresses local; a wildcard listen address (the whole
    value) becomes 127.0.0.1."""
    if value == WILDCARD:
        return "127.0.0.1"
    for old in sorted(mapping, key=len, reverse=True):
        value = value.replace(old, mapping[old])
    return value


def localise_argv(argv: list[str], ports: dict[str, int], mapping: dict[str, str]) -> list[str]:
    """A compose command with its addresses made local; flags and their order untouched.
    ``ports``: a flag whose value is this process's port (``--port`` for ``--port 7077``,
    ``--port=`` for ``--port=8000``) -> the port."""
    out = []
    previous = ""
    for token in argv:
        token = localise(token, mapping)
        flag = token.split("=", 1)[0] + "=" if token.startswith("--") and "=" in token else ""
        if previous in ports:
            token = str(ports[previous])
        elif flag in ports:
            token = f"{flag}{ports[flag]}"
        elif token in ("spark-master", "--host=0.0.0.0"):
            token = "127.0.0.1" if token == "spark-master" else "--host=127.0.0.1"
        out.append(token)
        previous = token
    return out


def compose_files() -> list[Path]:
    """``COMPOSE_FILE`` as compose reads it (``a.yml:b.yml``), or docker-compose.yml."""
    raw = os.environ.get("COMPOSE_FILE", "")
    return [BASE_DIR / item for item in raw.split(os.pathsep) if item] or [COMPOSE_FILE]


def default_var(files: list[Path]) -> Path:
    """``var/prod`` for the main file alone, ``var/prod-cluster`` with the cluster override:
    another topology never reuses a run's data (its brokers, replicas, quorum differ)."""
    extra = [Path(f).name.removeprefix("docker-compose.").rsplit(".", 1)[0] for f in files[1:]]
    return BASE_DIR / "var" / "-".join(["prod", *extra])


def default_variables(var: Path) -> dict[str, str]:
    """The ``.env`` values compose requires, generated once and kept in ``<var>/.env``."""
    env_file = var / ".env"
    saved: dict[str, str] = {}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                saved[key] = value
    wanted = {
        "DJANGO_SECRET_KEY": saved.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(48),
        "POSTGRES_PASSWORD": saved.get("POSTGRES_PASSWORD") or secrets.token_urlsafe(18),
        "REDIS_PASSWORD": saved.get("REDIS_PASSWORD") or secrets.token_urlsafe(18),
        "ORDERTRACK_DOMAIN": saved.get("ORDERTRACK_DOMAIN") or "localhost",
        "SIMULATOR_DEMO_PASSWORD": saved.get("SIMULATOR_DEMO_PASSWORD")
        or secrets.token_urlsafe(12),
    }
    if wanted != saved:
        var.mkdir(parents=True, exist_ok=True)
        env_file.write_text("".join(f"{k}={v}\n" for k, v in wanted.items()))
        env_file.chmod(0o600)
    return wanted


def base_env(var: Path) -> dict[str, str]:
    """What the image provides every process (Dockerfile ENV), with local paths."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": os.pathsep.join(
            [venv_bin, str(spark_home() / "bin"), os.environ.get("PATH", "/usr/bin:/bin")]
        ),
        "PYTHONPATH": str(BASE_DIR),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SPARK_HOME": str(spark_home()),
        "ORDERTRACK_VAR_DIR": str(var / "app"),
        "HOME": str(var / "home"),
        "LANG": "C.UTF-8",
        # Containers resolve their own host names; here every Spark process uses loopback.
        "SPARK_LOCAL_IP": "127.0.0.1",
        **({"JAVA_HOME": os.environ["JAVA_HOME"]} if "JAVA_HOME" in os.environ else {}),
    }


def pg_bin(name: str) -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if found:
        return found[-1]
    which = shutil.which(name)
    if which:
        return Path(which)
    raise FileNotFoundError(f"{name}: PostgreSQL is not installed (bash .ci/system-deps.sh)")


def _kafka_port(ports: Ports, node: str, listener: str) -> int:
    """A Kafka node's local port for one of its listeners (the first node: the fields)."""
    if node == "kafka" and listener in ("PLAINTEXT", "CONTROLLER"):
        return ports.kafka if listener == "PLAINTEXT" else ports.kafka_controller
    return ports.of(node if listener == "PLAINTEXT" else f"{node}:{listener.lower()}")


def _own(ports: Ports, name: str, role: str, first: int, what: str = "") -> int:
    """The first instance's port, or one of its own for a further instance."""
    return first if name == role else ports.of(f"{name}{what}")


def plan(
    var: Path | None = None,
    ports: Ports | None = None,
    overrides: dict[str, str] | None = None,
    demo: bool = False,
    files: list[Path] | None = None,
) -> Plan:
    files = files or compose_files()
    var = (var or default_var(files)).resolve()
    ports = ports or Ports.kept(var)
    variables = {**default_variables(var), **os.environ, **(overrides or {})}
    variables.setdefault("WEB_WORKERS", "2")
    project = load_project(variables, files)
    # Compose starts a service with profiles only when one of them is active
    # (COMPOSE_PROFILES, compose's own variable; --demo activates "demo").
    active = {p for p in variables.get("COMPOSE_PROFILES", "").split(",") if p} | (
        {"demo"} if demo else set()
    )
    services = {
        n: s
        for n, s in project.services.items()
        if not s.get("profiles") or active & set(s["profiles"])
    }
    roles = {n: r for n, r in project.roles.items() if n in services}
    kafka_nodes = [
        n for n, s in services.items() if str(s.get("image", "")).startswith("apache/kafka")
    ]
    pinot_servers = [
        n for n, s in services.items() if (s.get("command") or [""])[0] == "StartServer"
    ]
    webs = [n for n in services if roles[n] == "web"]
    if len(webs) > 1 and "proxy" not in services:
        raise ValueError(f"{', '.join(webs)} need the proxy in front of them (one address)")
    listen = {w: ports.of(w) if len(webs) > 1 else ports.web for w in webs}

    mapping = {
        "@postgres:5432/": f"@127.0.0.1:{ports.postgres}/",
        "redis://redis:6379": f"redis://127.0.0.1:{ports.redis}",
        "@redis:6379/": f"@127.0.0.1:{ports.redis}/",  # a REDIS_URL with its password
        "http://pinot-broker:8099": f"http://127.0.0.1:{ports.pinot}",
        "http://pinot-controller:9000": f"http://127.0.0.1:{ports.pinot_controller}",
        "spark://spark-master:7077": f"spark://127.0.0.1:{ports.spark}",
        "/var/lib/ordertrack": str(var / "lib"),
    }
    node_settings = {n: image_properties(service_env(services[n])) for n in kafka_nodes}
    for node, settings in node_settings.items():
        for listener, port in listener_ports(settings["listeners"]).items():
            mapping[f"{node}:{port}"] = f"127.0.0.1:{_kafka_port(ports, node, listener)}"
    for web in webs:
        port = next(a for a in services[web]["command"] if a.startswith("--port=")).split("=")[1]
        mapping[f"{web}:{port}"] = f"127.0.0.1:{listen[web]}"

    base = base_env(var)
    processes: dict[str, tuple[list[str], dict[str, str]]] = {}
    addresses: dict[str, str] = {}

    def env_of(name: str) -> dict[str, str]:
        env = {k: localise(v, mapping) for k, v in service_env(services[name]).items()}
        if roles[name] == "web" and name != "web" and "WEB_METRICS_PORT" in env:
            env["WEB_METRICS_PORT"] = str(ports.of(f"{name}:metrics"))  # its container's own
        return {**base, **env}

    pg_env = service_env(services["postgres"])
    processes["postgres"] = (
        [
            str(pg_bin("postgres")), "-D", str(var / "postgres"), "-p", str(ports.postgres),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={var / 'run'}",
        ],
        {**base, "PGUSER": pg_env["POSTGRES_USER"]},
    )  # fmt: skip
    processes["redis"] = (
        [*services["redis"]["command"], "--port", str(ports.redis), "--bind", "127.0.0.1"],
        dict(base),
    )
    addresses.update(postgres=f"127.0.0.1:{ports.postgres}", redis=f"127.0.0.1:{ports.redis}")

    kafka_env = env_of("kafka-topics")  # the application's Kafka variables (x-kafka-env)
    for node, settings in node_settings.items():
        own = {
            listener: _kafka_port(ports, node, listener)
            for listener in listener_ports(settings["listeners"])
        }
        settings = {k: localise(v, mapping) for k, v in settings.items() if k != "log.dirs"}
        settings["listeners"] = ",".join(f"{k}://127.0.0.1:{v}" for k, v in own.items())
        processes[node] = (
            [
                "python", "-m", "localrun.kafka", "--data-dir", str(var / "app" / node),
                "--cluster-id", service_env(services[node])["CLUSTER_ID"],
                *(f"--override={k}={v}" for k, v in settings.items()),
            ],
            {**kafka_env, "KAFKA_HEAP": variables.get("KAFKA_HEAP") or "512m"},
        )  # fmt: skip
        addresses[node] = ", ".join(f"{k.lower()} 127.0.0.1:{v}" for k, v in own.items())

    servers = {
        name: (ports.pinot_server, ports.pinot_server_admin)
        if i == 0
        else (ports.of(name), ports.of(f"{name}:admin"))
        for i, name in enumerate(pinot_servers)
    }
    pinot_env = {
        **env_of("pinot-init"),  # the loader pinot-init runs, with its settings
        "PINOT_BROKER_PORT": str(ports.pinot),
        "PINOT_CONTROLLER_PORT": str(ports.pinot_controller),
        "PINOT_SERVER_PORT": str(ports.pinot_server),
        "PINOT_SERVER_ADMIN_PORT": str(ports.pinot_server_admin),
        "PINOT_ZOOKEEPER_PORT": str(ports.zookeeper),
    }
    if len(servers) > 1:
        extra = list(servers.values())[1:]
        pinot_env["PINOT_EXTRA_SERVER_PORTS"] = ",".join(f"{n}:{a}" for n, a in extra)
    processes["pinot-broker"] = (["python", "-m", "localrun.pinot"], pinot_env)
    addresses["pinot-broker"] = (
        f"broker 127.0.0.1:{ports.pinot}, controller 127.0.0.1:{ports.pinot_controller}, "
        f"zookeeper 127.0.0.1:{ports.zookeeper}, "
        # A server's query port is on every interface (localrun.pinot.conf.every_interface).
        + ", ".join(f"{n} 0.0.0.0:{p} (admin 127.0.0.1:{a})" for n, (p, a) in servers.items())
    )

    one_shots = {name: (list(services[name]["command"]), env_of(name)) for name in ONE_SHOTS}
    for name, service in services.items():
        role = roles[name]
        if role not in APP_COMMANDS:
            continue
        own = {
            "spark-master": {"--port": ports.spark, "--webui-port": ports.spark_ui},
            "spark-worker": {"--webui-port": _own(ports, name, role, ports.worker_ui)},
            "web": {"--port=": listen.get(name, 0)},
        }.get(role, {})
        processes[name] = (
            localise_argv(list(service["command"]), own, mapping),
            env_of(name),
        )
        if own:
            addresses[name] = ", ".join(f"{flag.strip('-=')} {port}" for flag, port in own.items())
    # The driver: compose's spark-submit runs this module from the image's entry script.
    processes["streaming"] = (["python", "-m", "streaming"], env_of("streaming"))

    if len(webs) > 1:
        proxy = services["proxy"]
        sources = project.config_sources("proxy")
        processes["proxy"] = (
            [sources.get(token, token) for token in proxy["command"]],
            {
                **base,
                **{k: localise(v, mapping) for k, v in service_env(proxy).items()},
                # What the container gets from its published ports and its image (its
                # data under /data), set here by the Caddyfile's placeholders.
                "PROXY_HTTPS_PORT": str(ports.web),
                "PROXY_HTTP_PORT": str(ports.of("proxy:http")),
                "PROXY_BIND": "127.0.0.1",
                "CADDY_ADMIN": f"127.0.0.1:{ports.of('proxy:admin')}",
                "XDG_DATA_HOME": str(var / "caddy" / "data"),
                "XDG_CONFIG_HOME": str(var / "caddy" / "config"),
            },
        )
        addresses["proxy"] = f"https 127.0.0.1:{ports.web} -> " + ", ".join(
            f"{w} {listen[w]}" for w in webs
        )
    roles = {name: roles.get(name, name) for name in [*services, *processes]}
    return Plan(var, ports, variables, services, processes, one_shots, roles, mapping, addresses)

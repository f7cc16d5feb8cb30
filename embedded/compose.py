"""The production topology of ``docker-compose.yml``, run as local processes (``make run-prod``).

Nothing here restates the compose file: :func:`plan` reads ``docker-compose.yml`` and
turns each service into a local process with *its* command line and *its* environment
(YAML anchors, ``${VAR:-default}`` interpolation), changing only addresses — a compose
host name becomes ``127.0.0.1`` and a port a free local one, a named volume a folder
under ``var/prod/``. ``tests/test_production_run.py`` checks that mapping, so the two
cannot drift.

What runs as what:

=================  ==========================================================
compose service    local process
=================  ==========================================================
postgres           Debian's PostgreSQL (``initdb`` in ``var/prod/postgres``)
redis              Debian's ``redis-server`` with the compose command
kafka              Apache Kafka from ``jvm/kafka`` (``python -m embedded.kafka``), the
                   image's version with its settings (``jvm/kafka/server.properties``)
kafka-topics       its compose command, once
migrate            its compose command, once (plus ``collectstatic``, which the
                   image runs at build time)
spark-master,      their compose commands through pyspark's ``bin/spark-class``
spark-worker       (the image's PATH), as the unprivileged ``ordertrack`` user
                   with SPARK_HOME read-only to it
streaming          ``python -m streaming`` on the standalone master (compose's
                   ``spark-submit`` of the same module; both put Spark's Kafka
                   connector from ``jvm/spark-kafka`` on ``spark.jars``)
pinot-*,           Apache Pinot from ``jvm/pinot`` (``python -m embedded.pinot``: ZooKeeper,
zookeeper,         controller and broker, and the server in JVMs of their own), the
pinot-init         image's version; its tables loaded by the same loader as pinot-init's
relay, pushbridge  their compose commands
web                its compose command (uvicorn, several workers)
proxy              not run: clients talk to uvicorn on loopback and send
                   ``X-Forwarded-Proto: https`` as Caddy does
simulator          its compose command, with ``--demo`` (compose's demo profile)
=================  ==========================================================

When started as root, every process drops to the ``ordertrack`` system user
(``.ci/system-deps.sh`` creates it), as the image's ``USER ordertrack`` does; the
repository and the venv stay root-owned, so SPARK_HOME is read-only to them. Where
that user cannot run the venv's interpreter (a pyenv Python under ``/root``, as on
these machines), PostgreSQL and Redis still drop to it, the Python processes stay
root, and the Spark Master and Worker run in a private mount namespace whose
SPARK_HOME is a read-only bind mount: what broke in the image (a Worker writing
``$SPARK_HOME/work``) breaks here too.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from contract.conf import BASE_DIR, env_str
from embedded.components import Component

COMPOSE_FILE = BASE_DIR / "docker-compose.yml"
RUN_USER = "ordertrack"

#: Compose services this machine cannot run (images), and the local process standing in.
STAND_INS: dict[str, str | None] = {
    "kafka": "kafka",
    "pinot-broker": "pinot",
    "pinot-controller": None,
    "pinot-server": None,
    "pinot-init": None,  # python -m embedded.pinot runs the same loader
    "zookeeper": None,
    "proxy": None,  # TLS termination: not reproduced
    "prometheus": None,  # scrapes the others; tests/test_pipeline_health.py runs it on its own
}
#: Services that run once and must succeed before the application starts.
ONE_SHOTS = ("kafka-topics", "migrate")
#: Services compose runs from the application image, started here with their own command.
APP_COMMANDS = ("spark-master", "spark-worker", "relay", "pushbridge", "web", "simulator")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------- compose file

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)")


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's interpolation: ``$$``, ``${X}``, ``${X:-default}``, ``${X:?error}``."""
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        op, arg = match.group(2), match.group(3) or ""
        got = variables.get(name)
        if op in (":-", "-"):
            return got if got not in (None, "") or (op == "-" and got is not None) else arg
        if op in (":?", "?"):
            if got in (None, "") if op == ":?" else got is None:
                raise ValueError(f"compose variable {name}: {arg}")
            return got
        return got or ""

    return _VAR.sub(sub, value)


def load_compose(variables: dict[str, str], path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file's services, anchors merged and variables filled in."""
    raw = yaml.safe_load(path.read_text())
    return interpolate(raw["services"], variables)


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


# ----------------------------------------------------------------------------- the plan


@dataclass
class Ports:
    """The free local port each compose service's address maps to."""

    postgres: int = field(default_factory=free_port)
    redis: int = field(default_factory=free_port)
    kafka: int = field(default_factory=free_port)
    kafka_controller: int = field(default_factory=free_port)
    pinot: int = field(default_factory=free_port)
    pinot_controller: int = field(default_factory=free_port)
    pinot_server: int = field(default_factory=free_port)
    pinot_server_admin: int = field(default_factory=free_port)
    zookeeper: int = field(default_factory=free_port)
    spark: int = field(default_factory=free_port)
    spark_ui: int = field(default_factory=free_port)
    worker_ui: int = field(default_factory=free_port)
    web: int = 8000


@dataclass
class Plan:
    """Every local process of the production-like run, in compose's terms."""

    var: Path
    ports: Ports
    variables: dict[str, str]
    services: dict[str, Any]  # the interpolated compose services
    #: compose service -> (argv, env) of its local process
    processes: dict[str, tuple[list[str], dict[str, str]]]
    one_shots: dict[str, tuple[list[str], dict[str, str]]]

    def address_map(self) -> dict[str, str]:
        return address_map(self.ports, self.var)


def address_map(ports: Ports, var: Path) -> dict[str, str]:
    """Compose's addresses -> local ones (longest first when applied)."""
    return {
        "kafka:9092": f"127.0.0.1:{ports.kafka}",
        "@postgres:5432/": f"@127.0.0.1:{ports.postgres}/",
        "redis://redis:6379": f"redis://127.0.0.1:{ports.redis}",
        "http://pinot-broker:8099": f"http://127.0.0.1:{ports.pinot}",
        "http://pinot-controller:9000": f"http://127.0.0.1:{ports.pinot_controller}",
        "spark://spark-master:7077": f"spark://127.0.0.1:{ports.spark}",
        "/var/lib/ordertrack": str(var / "lib"),
    }


def localise(value: str, mapping: dict[str, str]) -> str:
    for old in sorted(mapping, key=len, reverse=True):
        value = value.replace(old, mapping[old])
    return value


def localise_argv(name: str, argv: list[str], ports: Ports, mapping: dict[str, str]) -> list[str]:
    """A compose command with its addresses made local; flags and their order untouched."""
    out = []
    port_of = {
        ("spark-master", "--port"): ports.spark,
        ("spark-master", "--webui-port"): ports.spark_ui,
        ("spark-worker", "--webui-port"): ports.worker_ui,
    }
    previous = ""
    for token in argv:
        token = localise(token, mapping)
        if (name, previous) in port_of:
            token = str(port_of[(name, previous)])
        elif name.startswith("spark-") and token == "spark-master":
            token = "127.0.0.1"
        elif name == "web" and token == "--host=0.0.0.0":
            token = "--host=127.0.0.1"
        elif name == "web" and token.startswith("--port="):
            token = f"--port={ports.web}"
        out.append(token)
        previous = token
    return out


def default_variables(var: Path) -> dict[str, str]:
    """The ``.env`` values compose requires, generated once and kept in ``var/prod/.env``."""
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


def plan(
    var: Path | None = None,
    ports: Ports | None = None,
    overrides: dict[str, str] | None = None,
    demo: bool = False,
) -> Plan:
    var = (var or BASE_DIR / "var" / "prod").resolve()
    ports = ports or Ports()
    variables = {**default_variables(var), **os.environ, **(overrides or {})}
    variables.setdefault("WEB_WORKERS", "2")
    services = load_compose(variables)
    mapping = address_map(ports, var)
    base = base_env(var)
    processes: dict[str, tuple[list[str], dict[str, str]]] = {}
    one_shots: dict[str, tuple[list[str], dict[str, str]]] = {}

    def env_of(name: str) -> dict[str, str]:
        return {
            **base,
            **{k: localise(v, mapping) for k, v in service_env(services[name]).items()},
        }

    pg = services["postgres"]
    pg_env = service_env(pg)
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
    kafka_env = env_of("kafka-topics")  # the x-kafka-env block
    processes["kafka"] = (
        ["python", "-m", "embedded.kafka"],
        {
            **kafka_env,
            "KAFKA_CONTROLLER_PORT": str(ports.kafka_controller),
            "KAFKA_HEAP": variables.get("KAFKA_HEAP") or "512m",
        },
    )
    processes["pinot-broker"] = (
        ["python", "-m", "embedded.pinot"],
        {
            **kafka_env,
            "PINOT_BROKER_PORT": str(ports.pinot),
            "PINOT_CONTROLLER_PORT": str(ports.pinot_controller),
            "PINOT_SERVER_PORT": str(ports.pinot_server),
            "PINOT_SERVER_ADMIN_PORT": str(ports.pinot_server_admin),
            "PINOT_ZOOKEEPER_PORT": str(ports.zookeeper),
        },
    )
    for name in ONE_SHOTS:
        one_shots[name] = (list(services[name]["command"]), env_of(name))
    for name in APP_COMMANDS:
        if name not in services or (services[name].get("profiles") and not demo):
            continue
        argv = localise_argv(name, list(services[name]["command"]), ports, mapping)
        processes[name] = (argv, env_of(name))
    # The driver: compose's spark-submit runs this module from the image's entry script.
    processes["streaming"] = (["python", "-m", "streaming"], env_of("streaming"))
    return Plan(var, ports, variables, services, processes, one_shots)


def pg_bin(name: str) -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if found:
        return found[-1]
    which = shutil.which(name)
    if which:
        return Path(which)
    raise FileNotFoundError(f"{name}: PostgreSQL is not installed (bash .ci/system-deps.sh)")


# ----------------------------------------------------------------------------- running it


def privileges() -> list[str]:
    """The prefix that drops root to the unprivileged user (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        import pwd

        pwd.getpwnam(RUN_USER)
    except KeyError:
        raise SystemExit(f"user {RUN_USER!r} missing: run `bash .ci/system-deps.sh`") from None
    return ["setpriv", f"--reuid={RUN_USER}", f"--regid={RUN_USER}", "--init-groups", "--"]


_VENV_OK: bool | None = None


def venv_usable_by_run_user() -> bool:
    """Can the unprivileged user run this venv's Python (and so PySpark's Python workers)?

    Not when the venv's interpreter lives under a root-only home (pyenv in /root, as on
    the CI machines): then the Python processes stay root and only the JVMs are confined.
    """
    global _VENV_OK
    if _VENV_OK is None:
        prefix = privileges()
        if not prefix:
            _VENV_OK = True
        else:
            # The same lookup the processes do: `python` on the image's PATH.
            probe = subprocess.run(
                [*prefix, "python", "-c", "import pyspark, pandas, django, confluent_kafka"],
                capture_output=True,
                env={"PATH": base_env(BASE_DIR / "var")["PATH"]},
            )
            _VENV_OK = probe.returncode == 0
    return _VENV_OK


def read_only_spark_home() -> list[str]:
    """Root in a private mount namespace whose SPARK_HOME is a read-only bind mount.

    The image's Spark processes cannot write SPARK_HOME (site-packages, owned by root);
    when they cannot drop to the unprivileged user here, this keeps that property.
    """
    home = str(spark_home())
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    prefix = ["unshare", "--mount", "--", "sh", "-c", script, home]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        # No CAP_SYS_ADMIN (a restricted container): run them as they are, and say so.
        print(
            "prod: cannot make SPARK_HOME read-only here (unshare/mount refused)", file=sys.stderr
        )
        return []
    return prefix


def prefix_for(name: str) -> list[str]:
    """How the process of compose service ``name`` is started (see module docstring)."""
    if name in ("postgres", "redis") or venv_usable_by_run_user():
        return privileges()
    if name in ("spark-master", "spark-worker") and os.geteuid() == 0:
        return read_only_spark_home()
    return []


def prepare_dirs(var: Path) -> None:
    for sub in ("postgres", "run", "app", "home", "lib/spark-work", "lib/checkpoints"):
        (var / sub).mkdir(parents=True, exist_ok=True)
    (var / "postgres").chmod(0o700)
    if os.geteuid() == 0:
        shutil.chown(var, RUN_USER, RUN_USER)
        for path in var.rglob("*"):
            with contextlib.suppress(FileNotFoundError):
                os.lchown(path, *_ids())


def _ids() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(RUN_USER)
    return entry.pw_uid, entry.pw_gid


def init_postgres(var: Path, user: str, password: str, env: dict[str, str]) -> None:
    """``initdb`` once (the official image's entrypoint does the same on an empty volume)."""
    data = var / "postgres"
    if (data / "PG_VERSION").exists():
        return
    pwfile = var / "run" / "pgpass"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        os.chown(pwfile, *_ids())
    subprocess.run(
        [*privileges(), str(pg_bin("initdb")), "-D", str(data), "-U", user,
         "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-instructions"],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    pwfile.unlink()


def create_database(port: int, user: str, password: str, database: str) -> None:
    import psycopg

    conninfo = f"host=127.0.0.1 port={port} user={user} password={password} dbname=postgres"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}" OWNER "{user}"')


READY_TEXT = {
    "postgres": "database system is ready to accept connections",
    "redis": "Ready to accept connections",
    "kafka": "kafka: topics ready",
    "pinot-broker": "pinot: ready",
    "spark-master": "I have been elected leader",
    "spark-worker": "Successfully registered with master",
    "relay": "relay: publishing",
    "pushbridge": "pushbridge: following",
    "web": "Application startup complete",
    "streaming": "streaming: ready",
    "simulator": "simulator: running",
}
#: Start order, as compose's depends_on conditions give it.
STAGES = {
    "postgres": 0, "redis": 0, "kafka": 0,
    "pinot-broker": 1, "spark-master": 1,
    "spark-worker": 2, "relay": 2, "pushbridge": 2, "web": 2,
    "streaming": 3, "simulator": 3,
}  # fmt: skip


def components(p: Plan) -> tuple[list[Component], list[Component]]:
    """The infrastructure (stage 0) and the application, as supervisor components."""
    infra, app = [], []
    for name, (argv, env) in p.processes.items():
        comp = Component(
            name,
            [*prefix_for(name), *argv],
            ready_text=READY_TEXT[name],
            stage=STAGES[name],
            env=env,
            ready_timeout=300.0 if name == "streaming" else 120.0,
        )
        (infra if comp.stage == 0 else app).append(comp)
    return infra, app


def run_one_shot(name: str, argv: list[str], env: dict[str, str], say) -> None:
    say(f"{name}: {' '.join(argv[:3])} ...")
    done = subprocess.run(
        [*prefix_for(name), *argv], env=env, cwd=BASE_DIR, capture_output=True, text=True
    )
    for line in (done.stdout + done.stderr).splitlines()[-5:]:
        say(f"{name}: {line}")
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited with {done.returncode}")


class ProductionRun:
    """Start and stop the whole plan; ``with ProductionRun(plan) as run: ...``."""

    def __init__(self, p: Plan, out=sys.stdout) -> None:
        from embedded.supervisor import Supervisor

        self.plan = p
        self.out = out
        infra, app = components(p)
        # The supervisors keep their logs under var_dir(): the run's own, not the caller's.
        saved = os.environ.get("ORDERTRACK_VAR_DIR")
        os.environ["ORDERTRACK_VAR_DIR"] = str(p.var / "app")
        try:
            self.infra = Supervisor(infra, out=out, max_restarts=3)
            self.app = Supervisor(app, out=out, max_restarts=3)
        finally:
            if saved is None:
                del os.environ["ORDERTRACK_VAR_DIR"]
            else:
                os.environ["ORDERTRACK_VAR_DIR"] = saved

    def start(self) -> None:
        p = self.plan
        prepare_dirs(p.var)
        pg = service_env(p.services["postgres"])
        init_postgres(p.var, pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], base_env(p.var))
        if not self.infra.start():
            raise RuntimeError("PostgreSQL, Redis or the broker did not start (var/prod/app/logs)")
        create_database(
            p.ports.postgres, pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]
        )
        say = self.infra.say
        for name, (argv, env) in p.one_shots.items():
            run_one_shot(name, argv, env, say)
        # The image runs collectstatic at build time; WhiteNoise serves the result.
        _, env = p.one_shots["migrate"]
        run_one_shot("collectstatic", ["python", "manage.py", "collectstatic", "--noinput",
                                       "--verbosity", "0"], env, say)  # fmt: skip
        ready = (
            f"ready: http://127.0.0.1:{p.ports.web}/ (send X-Forwarded-Proto: https, as the "
            f"proxy does); Spark master UI http://127.0.0.1:{p.ports.spark_ui}/"
        )
        if not self.app.start(ready_message=ready):
            raise RuntimeError("an application process did not start (var/prod/app/logs)")

    def stop(self) -> None:
        self.app.stop()
        self.infra.stop()

    def __enter__(self) -> ProductionRun:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demo", action="store_true", help="also run the simulator")
    parser.add_argument("--web-port", type=int, default=int(env_str("WEB_PORT", "8000")))
    args = parser.parse_args(argv)
    p = plan(ports=Ports(web=args.web_port), demo=args.demo)
    run = ProductionRun(p)
    stop = False

    def on_signal(*_):
        nonlocal stop
        stop = True
        for supervisor in (run.infra, run.app):  # also ends a start-up still under way
            supervisor.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run.start()
        while not stop and not run.app.failed.is_set() and not run.infra.failed.is_set():
            time.sleep(0.5)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        if stop:  # stopped during start-up: not a failure
            return 0
        print(f"!! {exc}", file=sys.stderr)
        return 1
    finally:
        run.stop()
    return 1 if run.app.failed.is_set() or run.infra.failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())

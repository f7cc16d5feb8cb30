"""Run a command against a throwaway PostgreSQL and Redis: the production backends for tests.

    python -m localrun.backends -- python -m pytest tests/integration/kafka/test_outbox_relay.py

starts Debian's PostgreSQL (``initdb`` in ``var/backends-<pid>/``, durability off: it
is thrown away) and ``redis-server`` on free loopback ports, runs the command with
``DATABASE_URL`` and ``REDIS_URL`` pointing at them (so Django uses PostgreSQL, the
Redis cache and the Redis channel layer), then stops both and deletes the folder.
``make test`` runs the production-path tests this way after the SQLite run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

from localrun import compose as prod
from runtime.conf import BASE_DIR

USER, PASSWORD, DATABASE = "ordertrack", "ordertrack-test", "ordertrack"


def _wait(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start in {timeout:.0f}s")
        time.sleep(0.1)


def redis_server_argv(port: int) -> list[str]:
    """Debian's ``redis-server`` on ``127.0.0.1:port``, keeping nothing on disk (it is
    thrown away), as the compose file runs it."""
    return [
        *prod.prefix_for("redis"), "redis-server", "--save", "", "--appendonly", "no",
        "--port", str(port), "--bind", "127.0.0.1",
    ]  # fmt: skip


def wait_for_redis(port: int) -> None:
    """Until the Redis on ``127.0.0.1:port`` answers PING."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        _wait(client.ping, "Redis")
    finally:
        client.close()


@contextlib.contextmanager
def backends() -> Iterator[dict[str, str]]:
    """PostgreSQL and Redis for the duration; yields the variables that point at them."""
    import psycopg

    var = BASE_DIR / "var" / f"backends-{os.getpid()}"
    ports = prod.Ports()
    env = prod.base_env(var)
    procs: list[subprocess.Popen] = []
    try:
        prod.prepare_dirs(var)
        prod.init_postgres(var, USER, PASSWORD, env)
        log = open(var / "backends.log", "ab")  # noqa: SIM115 - closed with the processes
        procs.append(subprocess.Popen(
            [*prod.prefix_for("postgres"), str(prod.pg_bin("postgres")), "-D", str(var / "postgres"),
             "-p", str(ports.postgres), "-c", "listen_addresses=127.0.0.1",
             "-c", f"unix_socket_directories={var / 'run'}", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        ))  # fmt: skip
        procs.append(
            subprocess.Popen(
                redis_server_argv(ports.redis), env=env, stdout=log, stderr=subprocess.STDOUT
            )
        )
        conninfo = f"host=127.0.0.1 port={ports.postgres} user={USER} password={PASSWORD}"
        _wait(lambda: psycopg.connect(conninfo + " dbname=postgres").close() is None, "PostgreSQL")
        wait_for_redis(ports.redis)
        prod.create_database(ports.postgres, USER, PASSWORD, DATABASE)
        yield {
            "DATABASE_URL": f"postgres://{USER}:{PASSWORD}@127.0.0.1:{ports.postgres}/{DATABASE}",
            "REDIS_URL": f"redis://127.0.0.1:{ports.redis}/0",
        }
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(var, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with backends() as variables:
        print(f"backends: {variables['DATABASE_URL']}  {variables['REDIS_URL']}", flush=True)
        return subprocess.call(argv, env={**os.environ, **variables})


if __name__ == "__main__":
    sys.exit(main())

"""Compose's networks and Redis's credentials (issue 69, N8): checked on the files, as there is
no Docker here. Every service that keeps data or runs work (Redis, PostgreSQL, Kafka, the
Spark master, ZooKeeper, Pinot) shares a network only with its own clients, the proxy only
with ``web``; Redis asks for a password, which every ``REDIS_URL`` carries, in compose and in
``make run-prod``'s local processes (localrun/compose)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from localrun import compose as prod
from localrun.compose.file import COMPOSE_FILE, load_project, service_env
from runtime.conf import BASE_DIR

CLUSTER_FILE = BASE_DIR / "docker-compose.cluster.yml"
VARIABLES = {
    "DJANGO_SECRET_KEY": "k" * 50,
    "POSTGRES_PASSWORD": "pw",
    "REDIS_PASSWORD": "redis-pw-69",
    "ORDERTRACK_DOMAIN": "localhost",
    "SIMULATOR_DEMO_PASSWORD": "demo",
}
APP = {"web", "pushbridge", "relay", "simulator", "notifier"}
PINOT = {"pinot-controller", "pinot-broker", "pinot-server", "pinot-init"}
#: Who may reach each service that takes unauthenticated (or password) clients: its clients
#: and its peers, nobody else. A service of the cluster file counts as the one it extends.
REACHABLE_BY = {
    "redis": APP | {"migrate"},
    "postgres": APP | {"migrate"},
    "kafka": APP | PINOT | {"kafka", "kafka-topics", "streaming", "spark-worker"},
    "spark-master": {"spark-worker", "streaming"},
    "zookeeper": PINOT,
    "pinot-broker": PINOT | {"web", "pushbridge", "notifier", "zookeeper"},
    # Kafka: it reads Kafka's partitions for a new table; ZooKeeper: Pinot's own
    "pinot-controller": PINOT | {"web", "pushbridge", "notifier", "kafka", "zookeeper"},
    "proxy": {"web"},
}
FILES = pytest.mark.parametrize(
    "files", [[COMPOSE_FILE], [COMPOSE_FILE, CLUSTER_FILE]], ids=["single", "cluster"]
)


def _networks(service: dict) -> set[str]:
    networks = service.get("networks")
    return set(networks or ["default"])


@FILES
def test_each_store_shares_a_network_only_with_its_clients(files):
    project = load_project(VARIABLES, files)
    role = project.roles
    for name, service in project.services.items():
        allowed = REACHABLE_BY.get(role[name])
        if allowed is None:
            continue
        reaching = {
            role[other]
            for other, theirs in project.services.items()
            if other != name and _networks(theirs) & _networks(service)
        }
        assert reaching <= allowed | {role[name]}, (name, sorted(reaching - allowed))


@FILES
def test_redis_asks_for_the_password_every_redis_url_carries(files):
    project = load_project(VARIABLES, files)
    command = project.services["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == VARIABLES["REDIS_PASSWORD"]
    urls = {
        name: env["REDIS_URL"]
        for name, service in project.services.items()
        if "REDIS_URL" in (env := service_env(service))
    }
    assert set(urls) >= {"web", "pushbridge"}
    for name, url in urls.items():
        assert urlsplit(url).password == VARIABLES["REDIS_PASSWORD"], name
    health = " ".join(map(str, project.services["redis"]["healthcheck"]["test"]))
    assert "REDISCLI_AUTH" in service_env(project.services["redis"]) or "-a" in health


def test_make_run_prods_redis_asks_for_the_password_too(tmp_path):
    plan = prod.plan(var=tmp_path / "prod", overrides=VARIABLES, demo=True)
    argv, _ = plan.processes["redis"]
    assert argv[argv.index("--requirepass") + 1] == VARIABLES["REDIS_PASSWORD"]
    for name, (_, env) in plan.processes.items():
        if "REDIS_URL" in env:
            url = urlsplit(env["REDIS_URL"])
            assert (url.hostname, url.password) == ("127.0.0.1", VARIABLES["REDIS_PASSWORD"])
            assert re.fullmatch(r"\d+", str(url.port)), name

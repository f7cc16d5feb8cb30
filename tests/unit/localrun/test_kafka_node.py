"""The local Apache Kafka node (localrun/kafka.py): its formatting and its settings."""

from __future__ import annotations

from localrun.kafka import KafkaBroker, _cluster_id


def test_a_cluster_id_never_starts_with_a_dash():
    """Kafka's storage tool reads an argument starting with "-" as an option: a random id
    must never start with one (a 1-in-64 failure of every fresh node, seen in CI)."""
    ids = [_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_the_node_runs_the_shared_settings_with_only_its_addresses_added(tmp_path):
    """One settings file for every mode: the node adds its listeners, quorum and data
    folder, and keeps every other line of jvm/kafka/server.properties."""
    node = KafkaBroker(data_dir=tmp_path, port=41001, controller_port=41002)
    lines = dict(
        line.split("=", 1)
        for line in node.properties().splitlines()
        if line and not line.startswith("#")
    )
    assert lines["listeners"] == "PLAINTEXT://127.0.0.1:41001,CONTROLLER://127.0.0.1:41002"
    assert lines["controller.quorum.voters"] == "1@127.0.0.1:41002"
    assert lines["log.dirs"] == str(tmp_path / "log")
    assert lines["auto.create.topics.enable"] == "false"
    assert lines["process.roles"] == "broker,controller"

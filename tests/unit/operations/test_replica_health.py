"""How the pipeline monitor counts missing copies (``ordertrack_replicas_missing``, the
ReplicasMissing alert): a lost Kafka broker or Pinot server changes no stage's lag while
the other replicas serve, so these counts are what shows it. The counting runs here on
the clients' own answer shapes; tests/system/pipeline/test_kafka_cluster_faults.py and
tests/integration/pinot/test_real_pinot.py::test_a_killed_server_comes_back_from_kafka check it against a
killed broker and a killed server."""

from __future__ import annotations

from confluent_kafka.admin import ClusterMetadata, PartitionMetadata, TopicMetadata

from tracker.operations.replicas import partitions_out_of_sync, segments_short


def _partition(number: int, leader: int, isrs: list[int]) -> PartitionMetadata:
    part = PartitionMetadata()
    part.id, part.leader, part.replicas, part.isrs = number, leader, [1, 2, 3], isrs
    return part


def test_a_partition_short_of_in_sync_replicas_or_without_a_leader_is_out_of_sync():
    metadata = ClusterMetadata()
    topic = metadata.topics.setdefault("orders", TopicMetadata())
    topic.partitions = {
        0: _partition(0, 1, [1, 2, 3]),
        1: _partition(1, 2, [2, 3]),  # node 1 fell out of sync
        2: _partition(2, -1, []),  # no leader at all
    }
    other = metadata.topics.setdefault("not_ours", TopicMetadata())
    other.partitions = {0: _partition(0, -1, [])}
    assert partitions_out_of_sync(metadata, ["orders", "missing_topic"]) == 2
    assert partitions_out_of_sync(metadata, []) == 0


def test_a_partition_whose_leader_did_not_answer_is_out_of_sync_though_its_metadata_is_whole():
    """A node that died still leads its partitions, in sync, until the cluster fences it:
    the monitor counts the partitions whose end it could not read (issue 69's drill)."""
    metadata = ClusterMetadata()
    topic = metadata.topics.setdefault("orders", TopicMetadata())
    topic.partitions = {n: _partition(n, n + 1, [1, 2, 3]) for n in range(3)}
    assert partitions_out_of_sync(metadata, ["orders"]) == 0
    assert partitions_out_of_sync(metadata, ["orders"], {("orders", 0), ("other", 1)}) == 1
    assert partitions_out_of_sync(metadata, ["orders"], {("orders", 0), ("orders", 2)}) == 2


def test_a_segment_served_by_fewer_servers_than_assigned_is_short():
    ideal = {
        "t__0__1": {"Server_a": "CONSUMING", "Server_b": "CONSUMING"},
        "t__0__0": {"Server_a": "ONLINE", "Server_b": "ONLINE"},
        "t__1__0": {"Server_a": "ONLINE", "Server_b": "ONLINE"},
        "t__2__0": {"Server_a": "OFFLINE"},  # assigned to nobody serving: nothing missing
    }
    external = {
        "t__0__1": {"Server_a": "CONSUMING"},  # Server_b is gone
        "t__0__0": {"Server_a": "ONLINE", "Server_b": "ONLINE"},
        "t__1__0": {"Server_a": "ONLINE", "Server_b": "ERROR"},
    }
    assert segments_short(ideal, external) == 2
    assert segments_short(ideal, {**external, "t__0__1": ideal["t__0__1"]}) == 1
    assert segments_short({}, external) == 0

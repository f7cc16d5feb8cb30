"""The product's topics: how they are created, where their partitions start and end,
and what retention has cut from them."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contract.events import Topic, topic_name
from runtime.conf import KafkaConfig, kafka_config
from runtime.kafka.clients import admin, consumer


def topic_specs(names: Iterable[str], config: KafkaConfig | None = None) -> list[NewTopic]:
    """How the product's topics are created: the configured partitions, replicas and
    retention, and ``min.insync.replicas`` on the topic itself, so that a broker default
    changed later (or missed on one node) never weakens what ``acks=all`` promises."""
    config = config or kafka_config()
    return [
        NewTopic(
            name,
            num_partitions=config.partitions,
            replication_factor=config.replication_factor,
            config={
                "retention.ms": str(config.retention_ms),
                "retention.bytes": str(config.retention_bytes),
                "min.insync.replicas": str(config.min_insync_replicas),
            },
        )
        for name in names
    ]


def ensure_topics(
    topics: Iterable[Topic | str] = tuple(Topic),
    config: KafkaConfig | None = None,
    timeout: float = 15.0,
) -> list[str]:
    """Create missing topics as :func:`topic_specs` says, and return once the broker's
    metadata names every partition of each with a leader.

    Returns the physical names created (empty when all existed). Safe to call
    concurrently and repeatedly: "already exists" is success.
    """
    config = config or kafka_config()
    client = admin(config)
    names = [topic_name(t, config.topic_prefix) for t in topics]
    existing = set(client.list_topics(timeout=timeout).topics)
    missing = [n for n in names if n not in existing]
    if not missing:
        return []
    futures = client.create_topics(topic_specs(missing, config), operation_timeout=timeout)
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    _wait_led(client, created, timeout)
    return created


def _wait_led(client: AdminClient, names: list[str], timeout: float) -> None:
    """Wait until the broker's metadata has a leader for every partition of ``names``.

    CreateTopics answers once the controller has committed the topics; a broker learns
    of them from the metadata log a moment later (longer on a busy machine), and until
    then a client asking it for their partitions is told they do not exist."""
    deadline = time.monotonic() + timeout
    while names:
        listed = client.list_topics(timeout=max(deadline - time.monotonic(), 1.0)).topics
        pending = [
            name
            for name in names
            if name not in listed
            or listed[name].error is not None
            or not listed[name].partitions
            or any(part.leader < 0 for part in listed[name].partitions.values())
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"no leader yet for {', '.join(pending)}")
            )
        time.sleep(0.05)


def partitions_of(cons: Consumer, topic: str, timeout: float = 10.0) -> list[int]:
    """The topic's partition numbers, as the broker's metadata has them."""
    metadata = cons.list_topics(topic, timeout=timeout).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)


def end_offsets(
    cons: Consumer, topic: str, partitions: Iterable[int] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """Each partition's next offset (its high watermark)."""
    return {p: high for p, (_, high) in _watermarks(cons, topic, partitions, timeout).items()}


def start_offsets(
    cons: Consumer, topic: str, partitions: Iterable[int] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """Each partition's first offset still in the log (retention deletes the ones below)."""
    return {p: low for p, (low, _) in _watermarks(cons, topic, partitions, timeout).items()}


def _watermarks(
    cons: Consumer, topic: str, partitions: Iterable[int] | None, timeout: float
) -> dict[int, tuple[int, int]]:
    """Each partition's (low, high) watermark offsets."""
    parts = list(partitions) if partitions is not None else partitions_of(cons, topic, timeout)
    return {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout) for p in parts}


def retention_report(config: KafkaConfig | None = None, skip: Iterable[str] = ()) -> list[str]:
    """One line per product topic that retention has cut: how many records it removed
    (whether every reader had read them first is each reader's own report). ``skip``:
    topics just created (empty, and their partitions may have no leader yet)."""
    config = config or kafka_config()
    cons = consumer(config)
    lines = []
    try:
        existing = set(cons.list_topics(timeout=10).topics) - set(skip)
        for topic in Topic:
            name = topic_name(topic, config.topic_prefix)
            if name not in existing:
                continue
            try:
                removed = sum(start_offsets(cons, name).values())
            except KafkaException as exc:
                lines.append(f"could not read where {name} starts: {exc}")
                continue
            if removed:
                cap = (
                    f", {config.retention_bytes // 1_048_576} MiB a partition"
                    if config.retention_bytes > 0
                    else ""
                )
                lines.append(
                    f"retention has removed the oldest {removed} records of {name} "
                    f"(kept: {config.retention_ms // 3_600_000} h{cap})"
                )
    finally:
        cons.close()
    return lines

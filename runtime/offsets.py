"""How far each reader has read: the input of pipeline health's lag per stage.

Each reader reports the next offset it will read on each topic as the committed
offsets of the consumer group ``ordertrack-position.<reader>``
(:class:`OffsetReporter`): the push bridge from its own consumers, the stream job
from its query's progress (Spark's Kafka source commits
nothing to Kafka, so its driver reports each batch's end offsets). The readers
assign their partitions, so the group is a label for those offsets, never joined.
The operators' pipeline view compares them with the topics' ends
(:func:`offsets_by_reader`); in production the same groups are there to read.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from runtime.conf import KafkaConfig, kafka_config

log = logging.getLogger(__name__)

GROUP_PREFIX = "ordertrack-position."
#: How often a reader reports its positions (seconds).
REPORT_EVERY = 1.0


def offsets_group(reader: str) -> str:
    return f"{GROUP_PREFIX}{reader}"


class GroupOffsets:
    """Commits and fetches position groups' offsets, through one consumer per group."""

    def __init__(self, config: KafkaConfig | None = None, **overrides: object) -> None:
        self.config = config or kafka_config()
        self.overrides = overrides
        self._by_group: dict[str, Consumer] = {}

    def _consumer(self, group: str) -> Consumer:
        cons = self._by_group.get(group)
        if cons is None:
            from runtime.kafka import consumer

            cons = consumer(self.config, **{**self.overrides, "group.id": group})
            self._by_group[group] = cons
        return cons

    def commit(self, group: str, offsets: list[TopicPartition]) -> None:
        """Not waited for (a reader must not stall while the broker is away); the last
        commit's result is served here, so none pile up."""
        cons = self._consumer(group)
        cons.poll(0)
        cons.commit(offsets=offsets, asynchronous=True)

    def committed(
        self, group: str, partitions: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        return self._consumer(group).committed(partitions, timeout=timeout)

    def keep_only(self, groups: set[str]) -> None:
        """Close the consumers of other groups."""
        for group in set(self._by_group) - groups:
            self._by_group.pop(group).close()

    def close(self) -> None:
        self.keep_only(set())


class OffsetReporter:
    """Reports one reader's next offsets, at most every ``REPORT_EVERY`` seconds."""

    def __init__(self, reader: str, config: KafkaConfig | None = None) -> None:
        self.reader = reader
        self.group = offsets_group(reader)
        self.offsets = GroupOffsets(config)
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= REPORT_EVERY

    def report(self, positions: dict[str, dict[int, int]]) -> None:
        """Commit ``positions`` (topic -> partition -> next offset).

        Best effort: a failed report only leaves the lag shown a second older."""
        self._last = time.monotonic()
        offsets = [
            TopicPartition(topic, p, o)
            for topic, parts in sorted(positions.items())
            for p, o in sorted(parts.items())
        ]
        if not offsets:
            return
        try:
            self.offsets.commit(self.group, offsets)
        except Exception as exc:  # noqa: BLE001 - the broker may be restarting
            log.debug("position report of %s failed: %s", self.reader, exc)

    def close(self) -> None:
        self.offsets.close()


def offsets_by_reader(
    client: AdminClient, topics: list[str], offsets: GroupOffsets
) -> dict[str, dict[str, dict[int, int]]]:
    """Every reader's reported positions on ``topics``: reader -> topic -> partition ->
    next offset. ``offsets`` keeps a consumer for each group found."""
    found: dict[str, dict[str, dict[int, int]]] = {}
    listed = client.list_consumer_groups().result(10)
    partitions = {
        topic: sorted(meta.partitions)
        for topic, meta in client.list_topics(timeout=10).topics.items()
        if topic in topics
    }
    wanted = [TopicPartition(t, p) for t, parts in sorted(partitions.items()) for p in parts]
    seen = set()
    for listing in listed.valid:
        group = listing.group_id
        if not group.startswith(GROUP_PREFIX) or not wanted:
            continue
        seen.add(group)
        reader = group[len(GROUP_PREFIX) :]
        for tp in offsets.committed(group, wanted, timeout=10):
            if tp.error is None and tp.offset >= 0:
                found.setdefault(reader, {}).setdefault(tp.topic, {})[tp.partition] = tp.offset
    offsets.keep_only(seen)
    return found

"""How many copies of the product's data are missing where a store keeps several
(``ordertrack_replicas_missing``). A lost Kafka broker or Pinot server changes no stage's
lag while the other replicas serve, so these counts are what shows it. Pure counting over
the clients' own answers, so tests/unit/operations/test_replica_health.py runs it without the engines."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

#: States in which a server holds a segment and answers for it.
_SERVING = {"ONLINE", "CONSUMING"}


def partitions_out_of_sync(
    metadata: Any, topics: list[str], unanswered: Collection[tuple[str, int]] = ()
) -> int:
    """Partitions of ``topics`` (in a ``list_topics`` answer) that have no leader or fewer
    in-sync replicas than replicas, or whose leader did not answer (``unanswered``, as
    (topic, partition): a node that died before the cluster noticed): a broker is down or
    falling behind."""
    count = 0
    for name in topics:
        topic = metadata.topics.get(name)
        for number, partition in topic.partitions.items() if topic is not None else ():
            short = partition.leader < 0 or len(partition.isrs) < len(partition.replicas)
            if short or (name, number) in unanswered:
                count += 1
    return count


def segments_short(ideal: dict[str, dict[str, str]], external: dict[str, dict[str, str]]) -> int:
    """Segments that fewer servers serve (the external view) than the controller assigned
    (the ideal state): a server is down, or still loading them."""
    count = 0
    for segment, assigned in ideal.items():
        wanted = sum(1 for state in assigned.values() if state in _SERVING)
        serving = sum(1 for state in (external.get(segment) or {}).values() if state in _SERVING)
        count += serving < wanted
    return count

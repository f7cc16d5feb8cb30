"""How far each reader has read, and where it stands after the embedded broker rolled over.

The embedded broker (:mod:`embedded.broker`) keeps its log in memory and is
bounded by a *rollover*: it carries every record some reader has not read yet
into a fresh log and restarts. Two things make that lossless for readers:

* **Reported positions.** Each reader (the stream job, the Pinot stand-in, the
  push bridge) reports the next offset it will read, per topic incarnation, as
  the committed offsets of the consumer group ``ordertrack-position.<reader>.<topic
  id>`` (:class:`PositionReporter`; assign-only readers, so the group is a label,
  never joined). The rollover carries each partition from the lowest reported
  position; a topic nobody reports on (``dead_letters``) is carried whole, within
  the retention.
* **The rollover log.** The carried records get new offsets (old offset minus the
  partition's *base*) in a topic with a new id. The broker appends each rollover's
  ``old id -> new id, bases`` to a JSON file beside it before letting any client
  back in; a reader that finds a new topic id translates its position through it
  (:meth:`RolloverLog.translate`). A topic id the log does not know means the broker
  lost its data (a crash): the reader starts that topic again from offset 0.

Production brokers never roll over: no reader finds the file, so nothing changes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from contract.conf import KafkaConfig, kafka_config, var_dir

log = logging.getLogger(__name__)

GROUP_PREFIX = "ordertrack-position."
#: How often a reader reports its positions (seconds): a rollover carries at most this
#: much more than it must.
REPORT_EVERY = 1.0


def position_group(reader: str, topic_id: str) -> str:
    return f"{GROUP_PREFIX}{reader}.{_group_safe(topic_id)}"


def _group_safe(topic_id: str) -> str:
    """The topic id in base64's URL-safe alphabet. Tansu cuts a group id at its first
    "/" when listing groups, and finds no offsets under the cut name; a topic id (16
    random bytes in base64) holds a "/" about half the time, and that topic's positions
    were lost, so a rollover carried it whole."""
    return topic_id.replace("+", "-").replace("/", "_")


def rollover_log_path(config: KafkaConfig | None = None) -> Path:
    """The rollover log of the broker at ``config``'s bootstrap address."""
    config = config or kafka_config()
    address = re.sub(r"[^A-Za-z0-9]+", "-", config.bootstrap_servers)
    return var_dir() / f"broker-rollovers-{address}.json"


def topic_ids(client: AdminClient, topics: list[str], timeout: float = 10.0) -> dict[str, str]:
    """Each topic's id (a topic created again, as after a broker restart, gets a new one)."""
    if not topics:
        return {}
    futures = client.describe_topics(TopicCollection(sorted(set(topics))))
    return {t: str(f.result(timeout).topic_id) for t, f in futures.items()}


class RolloverLog:
    """The broker's rollover history as a reader sees it; cheap to poll (one stat)."""

    def __init__(self, config: KafkaConfig | None = None) -> None:
        self.path = rollover_log_path(config)
        self._stamp: tuple[int, int] | None = None
        #: old topic id -> {"topic", "new_id", "bases": {partition: base}}
        self._by_old_id: dict[str, dict[str, Any]] = {}

    def changed(self) -> bool:
        """True when a rollover was recorded since the last call (the log is then reloaded)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        self._load()
        return True

    def _load(self) -> None:
        try:
            entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        self._by_old_id = {e["old_id"]: e for e in entries}

    def knows(self, topic_id: str | None) -> bool:
        """Whether ``topic_id`` was rolled over (as of the last :meth:`changed`)."""
        return topic_id in self._by_old_id

    def translate(
        self, old_id: str, positions: dict[int, int], new_id: str
    ) -> dict[int, int] | None:
        """``positions`` in incarnation ``old_id`` moved to ``new_id`` through every rollover
        between them, or None when the log does not lead there (the broker lost its data)."""
        self.changed()
        current, moved = old_id, dict(positions)
        for _ in range(10_000):
            if current == new_id:
                return moved
            entry = self._by_old_id.get(current)
            if entry is None:
                return None
            bases = {int(p): b for p, b in entry["bases"].items()}
            for p, offset in moved.items():
                base = bases.get(p, 0)
                if offset < base:
                    log.error(
                        "rollover of %s[%d] began at offset %d, past this reader's %d: "
                        "%d records it had not read were not carried",
                        entry["topic"],
                        p,
                        base,
                        offset,
                        base - offset,
                    )
                moved[p] = max(0, offset - base)
            current = entry["new_id"]
        return None


def append_rollover(path: Path, entries: list[dict[str, Any]]) -> None:
    """Add one rollover's entries (written whole, then renamed: readers never see half)."""
    try:
        history = json.loads(path.read_text())
    except (OSError, ValueError):
        history = []
    history.extend(entries)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(history))
    tmp.replace(path)


class GroupOffsets:
    """Commits and fetches position groups' offsets, through one consumer per group.

    Not through the admin API: in librdkafka 2.16 a coordinator-targeted admin request
    (AlterConsumerGroupOffsets, ListConsumerGroupOffsets) whose connection drops aborts
    the whole process ("rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt >
    0' failed", librdkafka PR #5397, unreleased), and every rollover drops every
    connection. A consumer reaches the group's coordinator through its own group
    machinery (docs/broker.md has the evidence)."""

    def __init__(self, config: KafkaConfig | None = None, **overrides: object) -> None:
        self.config = config or kafka_config()
        self.overrides = overrides
        self._by_group: dict[str, Consumer] = {}

    def _consumer(self, group: str) -> Consumer:
        cons = self._by_group.get(group)
        if cons is None:
            from contract.kafka import consumer

            cons = consumer(self.config, **{**self.overrides, "group.id": group})
            self._by_group[group] = cons
        return cons

    def commit(self, group: str, offsets: list[TopicPartition]) -> None:
        """Not waited for (a reader must not stall while the broker is held); the last
        commit's result is served here, so none pile up."""
        cons = self._consumer(group)
        cons.poll(0)
        cons.commit(offsets=offsets, asynchronous=True)

    def committed(
        self, group: str, partitions: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        return self._consumer(group).committed(partitions, timeout=timeout)

    def keep_only(self, groups: set[str]) -> None:
        """Close the consumers of other groups (topic incarnations that are gone)."""
        for group in set(self._by_group) - groups:
            self._by_group.pop(group).close()

    def close(self) -> None:
        self.keep_only(set())


class PositionReporter:
    """Reports one reader's next offsets to the broker, at most every ``REPORT_EVERY`` s."""

    def __init__(self, reader: str, config: KafkaConfig | None = None) -> None:
        from contract.kafka import admin

        self.reader = reader
        self.admin = admin(config)  # topic ids only (metadata, not the groups' coordinator)
        self.offsets = GroupOffsets(config)
        self._groups: dict[str, str] = {}  # topic -> the group of its incarnation now
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= REPORT_EVERY

    def report(self, topic: str, topic_id: str, positions: dict[int, int]) -> None:
        """Commit ``positions`` (partition -> next offset) for ``topic`` in ``topic_id``.

        Best effort: a failed report only makes the next rollover carry more."""
        self._last = time.monotonic()
        if not positions:
            return
        group = position_group(self.reader, topic_id)
        if self._groups.get(topic) != group:
            self._groups[topic] = group
            self.offsets.keep_only(set(self._groups.values()))
        try:
            self.offsets.commit(
                group, [TopicPartition(topic, p, o) for p, o in sorted(positions.items())]
            )
        except Exception as exc:  # noqa: BLE001 - the broker may be restarting
            log.debug("position report of %s for %s failed: %s", self.reader, topic, exc)


def positions_by_reader(
    client: AdminClient, ids: dict[str, str], offsets: GroupOffsets
) -> dict[str, dict[str, dict[int, int]]]:
    """Every reader's reported positions on each topic's current incarnation:
    reader -> topic -> partition -> next offset (``ids``: topic -> its id now).
    ``offsets`` keeps a consumer for each group found, and drops the others."""
    found: dict[str, dict[str, dict[int, int]]] = {}
    listed = client.list_consumer_groups().result(10)
    current = {_group_safe(topic_id): topic for topic, topic_id in ids.items()}
    partitions = {
        topic: sorted(meta.partitions)
        for topic, meta in client.list_topics(timeout=10).topics.items()
        if topic in ids
    }
    seen = set()
    for listing in listed.valid:
        group = listing.group_id
        if not group.startswith(GROUP_PREFIX):
            continue
        reader, _, topic_id = group[len(GROUP_PREFIX) :].rpartition(".")
        topic = current.get(topic_id)
        if topic is None or topic not in partitions:
            continue  # reported on an incarnation that no longer exists
        seen.add(group)
        wanted = [TopicPartition(topic, p) for p in partitions[topic]]
        for tp in offsets.committed(group, wanted, timeout=10):
            if tp.error is None and tp.offset >= 0:
                found.setdefault(reader, {}).setdefault(topic, {})[tp.partition] = tp.offset
    offsets.keep_only(seen)
    return found


def reported_positions(
    client: AdminClient, ids: dict[str, str], offsets: GroupOffsets
) -> dict[str, dict[int, int]]:
    """The lowest position any reader reported on each topic's current incarnation
    (``ids``: topic -> its id now); topics nobody reported on are absent."""
    lowest: dict[str, dict[int, int]] = {}
    for topics in positions_by_reader(client, ids, offsets).values():
        for topic, parts in topics.items():
            mine = lowest.setdefault(topic, {})
            for p, offset in parts.items():
                mine[p] = min(offset, mine.get(p, offset))
    return lowest

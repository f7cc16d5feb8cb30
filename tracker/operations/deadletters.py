"""Reading the dead-letter topic: what the pipeline refused, why, and the original bytes."""

from __future__ import annotations

import json

from contract.events import DeadLetter, Topic, topic_name
from runtime import kafka


def recent_dead_letters(limit: int = 100) -> list[DeadLetter]:
    """The newest ``limit`` dead letters (at most ``limit`` per partition read), newest first."""
    name = topic_name(Topic.DEAD_LETTERS)
    cons = kafka.consumer()
    try:
        ends = kafka.end_offsets(cons, name)
    finally:
        cons.close()
    start = {p: max(0, end - limit) for p, end in ends.items()}
    found = []
    for record in kafka.read_topic(Topic.DEAD_LETTERS, start=start, idle_timeout=0.2):
        body = json.loads(record.value)
        body.pop("schema_version", None)
        found.append(
            ((body["event_time"], record.partition, record.offset), DeadLetter.from_dict(body))
        )
    found.sort(key=lambda item: item[0], reverse=True)
    return [letter for _, letter in found[:limit]]

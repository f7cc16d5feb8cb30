"""The push bridge skips a deeply nested record and counts it (issue 53, L8).

Its quick JSON check (``Bridge.worth_parsing``) reads an enriched record's customer and
restaurant before validating it; ``json.loads`` raises ``RecursionError`` on deep
nesting, which escaped to the reader's loop: it reconnected and read the same offset
forever. Such a record is a bad record like any other: skipped, counted, and the reader
moves on.
"""

from __future__ import annotations

from contract.events import Topic, topic_name
from tracker.live.bridge import Bridge


def test_a_deeply_nested_enriched_record_is_skipped_and_counted():
    sent = []
    bridge = Bridge(sent.extend, listening=lambda group: False)  # no socket follows it
    deep = b"[" * 200_000 + b"]" * 200_000
    topic = topic_name(Topic.ORDERS_ENRICHED)
    assert bridge.worth_parsing(topic, b"7", deep)  # cannot be routed unread: parsed, and refused
    bridge.handle([(Topic.ORDERS_ENRICHED, deep)], fleet=True)
    assert sent == []
    assert bridge.skipped == {"invalid value": 1}

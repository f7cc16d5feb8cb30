"""Readers' reported positions, which decide what a rollover of the embedded broker
carries (contract/positions.py), are found again for every topic id, on the real broker.

Topic ids are 16 random bytes in base64, and about half of them hold a "/"; Tansu cuts
a group id at its first "/", so positions reported under the raw id were never found and
a rollover carried that topic whole (seen in the 2-hour run: all of delivery_locations).
"""

from __future__ import annotations

import time

from contract.events import Topic, topic_name
from contract.kafka import admin
from contract.positions import (
    GroupOffsets,
    PositionReporter,
    positions_by_reader,
    reported_positions,
)


def test_positions_are_found_for_topic_ids_with_every_base64_character(kafka_topics):
    ids = {  # the broker's topics; ids as the broker might have given them
        topic_name(Topic.DELIVERY_LOCATIONS): "AaIQPMa5fHC1dpHW7G/8fw",
        topic_name(Topic.ORDERS): "AaIQQUOrdtOBPk+b4aue7w",
        topic_name(Topic.ORDER_STATUSES): "AaIQQUOrdtOBPkSb4aue7w",
    }
    stream, bridge = PositionReporter("stream"), PositionReporter("bridge-1")
    for n, (topic, topic_id) in enumerate(ids.items()):
        stream.report(topic, topic_id, {0: 10 + n, 1: 20 + n})
        bridge.report(topic, topic_id, {0: 5 + n, 1: 30 + n})
    client, offsets = admin(), GroupOffsets()
    expected = {
        "stream": {t: {0: 10 + n, 1: 20 + n} for n, t in enumerate(ids)},
        "bridge-1": {t: {0: 5 + n, 1: 30 + n} for n, t in enumerate(ids)},
    }
    deadline = time.monotonic() + 10  # reports are not waited for
    while (
        found := positions_by_reader(client, ids, offsets)
    ) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert found == expected
    assert reported_positions(client, ids, offsets) == {
        t: {0: 5 + n, 1: 20 + n} for n, t in enumerate(ids)
    }
    offsets.close()

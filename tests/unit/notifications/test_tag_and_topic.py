"""The one tag/Topic rule (issue 71): one tag per order and moment, shared with the pages,
and a Web Push Topic derived from it that a push service accepts (RFC 8030: at most 32
characters of the URL-safe base64 alphabet), whatever the order id."""

from __future__ import annotations

import re

import pytest

from tracker.notifications.moments import (
    MOMENT_OF_STATUS,
    TAG_FORMAT,
    Moment,
    page_rule,
    tag,
    topic,
)

TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")


@pytest.mark.parametrize("order_id", [1, 42, 9_223_372_036_854_775_807])
def test_the_topic_fits_rfc_8030_for_any_order_id(order_id):
    for moment in Moment:
        assert TOPIC.fullmatch(topic(order_id, moment))


def test_each_order_and_moment_has_its_own_tag_and_topic():
    tags = {tag(o, m) for o in (1, 2, 12) for m in Moment}
    topics = {topic(o, m) for o in (1, 2, 12) for m in Moment}
    assert len(tags) == len(topics) == 3 * len(Moment)
    assert tag(42, Moment.OUT_FOR_DELIVERY) == "order-42-out_for_delivery"


def test_the_pages_get_the_same_rule():
    rule = page_rule()
    assert rule["tagFormat"] == TAG_FORMAT
    made = rule["tagFormat"].format(order_id=7, moment=rule["momentOfStatus"]["DELIVERED"])
    assert made == tag(7, Moment.DELIVERED)
    assert set(rule["momentOfStatus"]) == set(MOMENT_OF_STATUS)

"""One wording per moment (issue 71): the pushed payload and the open tab's own notification
of the same moment replace each other (one tag), so they say the same; both come from
``moments.WORDING``, the payload directly and the page through ``config.notifications``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tracker.notifications.moments import WORDING, Moment, page_rule
from tracker.notifications.payload import LockScreen, Window

AT = int(datetime(2026, 12, 7, 13, 12, tzinfo=UTC).timestamp() * 1000)


def as_the_page_words(order_id: int, moment: Moment) -> tuple[str, str]:
    """What ``notify.js`` ``wordingFor`` shows, from what the page is given."""
    words = page_rule()["wording"][moment.value]
    return words["title"].replace("{order_id}", str(order_id)), words["body"]


@pytest.mark.parametrize("moment", list(Moment))
def test_the_open_tab_and_the_push_word_a_moment_alike(moment):
    pushed = LockScreen.of(42, moment, "ANY", AT, None)
    assert as_the_page_words(42, moment) == (pushed.title, pushed.body)
    assert pushed.title == WORDING[moment][0].replace("{order_id}", "42")


def test_the_push_tells_the_window_in_the_customers_time_zone_under_the_same_title():
    window = Window(AT + 23 * 60_000, AT + 38 * 60_000)  # 13:35-13:50 UTC
    pushed = LockScreen.of(42, Moment.OUT_FOR_DELIVERY, "OUT_FOR_DELIVERY", AT, window)
    assert (pushed.title, pushed.body) == ("Order #42 is on its way", "Arriving 19:05–19:20")
    assert as_the_page_words(42, Moment.OUT_FOR_DELIVERY) == (pushed.title, "")
    late = LockScreen.of(42, Moment.RUNNING_LATE, "OUT_FOR_DELIVERY", AT, window)
    assert late.body == "Now arriving 19:05–19:20"


def test_every_moment_has_its_words():
    assert set(WORDING) == set(Moment)
    assert set(page_rule()["wording"]) == {m.value for m in Moment}

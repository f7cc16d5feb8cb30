"""Pipeline health measures each reader's lag on the topics that reader follows."""

from __future__ import annotations

from tracker.notifications.notifier import TOPICS
from tracker.operations.stages import STAGES


def test_the_notifiers_stage_measures_the_topics_the_notifier_follows():
    [stage] = [s for s in STAGES if s.reader == "notifier"]
    assert set(stage.topics) == set(TOPICS)

"""The pipeline's stages and how one is judged from the figures sampled from outside it.

A stage is **stalled** when its position has not moved for ``stall_seconds`` while its
input grew within that time and its lag grew; **behind** when its lag is above
``behind_records`` or it has not moved for half that time while records wait; otherwise
**ok** (also when idle: nothing to read); **unknown** when it could not be measured.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from contract.events import ENRICHED_TOPICS, SOURCE_TOPICS, Topic

OK, BEHIND, STALLED, UNKNOWN = "ok", "behind", "stalled", "unknown"


@dataclass(frozen=True)
class StageDef:
    """One stage of the pipeline and where its figures come from."""

    name: str
    label: str
    #: The reader name it reports positions as (a prefix: ``bridge`` matches
    #: ``bridge-<pid>``); None for the relay, measured from the outbox.
    reader: str | None
    topics: tuple[Topic, ...] = ()
    #: A stage a deployment may leave out (compose runs the notifier only in its profile):
    #: while no position of it is reported it is not shown, rather than "unknown".
    optional: bool = False


STAGES = (
    StageDef("relay", "Outbox relay", None),
    StageDef("stream", "Spark stream job", "stream", SOURCE_TOPICS),
    StageDef("pinot", "Pinot ingestion", "pinot", ENRICHED_TOPICS),
    StageDef("bridge", "Push bridge", "bridge", (Topic.ORDER_STATUSES, Topic.ORDERS_ENRICHED)),
    StageDef(
        "notifier",
        "Notifier",
        "notifier",
        (Topic.ORDER_STATUSES, Topic.DELIVERY_STATUSES),  # notifier.TOPICS (a test holds it)
        optional=True,
    ),
)
#: Why a Kafka stage has no figures: no reader of it reported a position.
NOT_RUNNING = "not running: no position reported on its topics"


@dataclass
class StageState:
    """A stage's last judgement, and what the next one needs of the samples before it."""

    name: str
    label: str
    status: str = UNKNOWN
    lag: int | None = None
    input_total: int | None = None
    #: Records per second the stage processed over the last sample interval.
    rate: float | None = None
    #: Seconds it has not moved while records wait (0 when moving or idle).
    stuck_seconds: float = 0.0
    error: str | None = None
    # not reported:
    _position: int | None = field(default=None, repr=False)
    _moved_at: float = field(default=0.0, repr=False)
    _lag_at_move: int = field(default=0, repr=False)
    _inputs: deque[tuple[float, int]] = field(default_factory=deque, repr=False)
    _sampled_at: float = field(default=0.0, repr=False)

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}

    def judge(
        self, value: tuple[int, int] | str, now: float, *, stall_seconds: float, behind_records: int
    ) -> None:
        """Take one sample's (input, lag), or why it could not be measured, at ``now``
        (monotonic seconds), and say ok, behind, stalled or unknown."""
        if isinstance(value, str):
            self.status, self.error, self.rate = UNKNOWN, value, None
            return
        total, lag = value
        position = total - lag
        self.error = None
        if self._position is None or position > self._position or lag == 0:
            if self._position is not None and now > self._sampled_at:
                self.rate = max(0, position - self._position) / (now - self._sampled_at)
            self._moved_at, self._lag_at_move = now, lag
        else:
            self.rate = 0.0
        self._position, self._sampled_at = position, now
        self.lag, self.input_total = lag, total
        # Input over the stall window: the oldest sample still inside it.
        self._inputs.append((now, total))
        while len(self._inputs) > 1 and self._inputs[1][0] <= now - stall_seconds:
            self._inputs.popleft()
        input_grew = total > self._inputs[0][1]
        waited = now - self._moved_at
        self.stuck_seconds = round(waited, 1) if lag else 0.0
        if waited >= stall_seconds and input_grew and lag > self._lag_at_move:
            self.status = STALLED
        elif lag > behind_records or (lag and waited >= stall_seconds / 2):
            self.status = BEHIND
        else:
            self.status = OK

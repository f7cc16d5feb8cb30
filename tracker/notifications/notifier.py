"""The notifier: follows the order topics as a consumer group, decides the moments, and
shows each at most once per order, moment and device or mailbox.

**Deciding.** A status event is a moment when :data:`.moments.MOMENT_OF_STATUS` names it.
"Out for delivery" tells the arrival window predicted at pickup
(:func:`tracker.tracking.eta.predict`, the prediction every page shows) and keeps it
(:class:`.models.ToldWindow`). A courier's point on the road (``delivery_statuses``)
predicts the arrival again, at most every ``NOTIFY_LATE_CHECK_SECONDS`` per order (the
other points are skipped by their key, unread); when that is more than
``NOTIFY_LATE_MARGIN_SECONDS`` past the latest time told, the customer is told it runs
late, with the new window, which becomes the one told: one notice per slip, and none while
the prediction stays within the new window (no flapping). The window's update and the
slip's log rows commit together, so two replicas or a redelivered record cannot announce
one slip twice.

**Shown once.** Before anything is sent, a row per (order, moment, occurrence, channel,
target) is written to the delivery log (:class:`.models.Delivery`, unique): the record's
redelivery, a restart, a rebuild of the topics or a second replica finds the row and sends
nothing. Offsets are committed once a poll's rows are written. A push logged as sending by
a notifier that stopped is sent again after ``NOTIFY_SENDING_LEASE_SECONDS`` (at least
once; the resend has the same tag and Topic, so it replaces the first); an email is logged
as sending before its SMTP conversation and is then counted unknown, never resent. A moment
older than ``NOTIFY_MAX_AGE_SECONDS`` is logged as dropped.

**Sending.** :class:`Dispatcher`: a bounded pool; at most ``NOTIFY_PER_DESTINATION`` sends
at once to one push service host or mail relay, so a slow one never holds the others; one
order's notifications to one target in order; 429, 5xx and timeouts retried with
exponential backoff up to ``NOTIFY_MAX_TRIES``; 404 and 410 delete the subscription.

One push service serves many subscriptions, and one of them may hang while the rest answer
(a device's queue stuck at the service): a push still running after ``NOTIFY_SLOW_SECONDS``
gives its host's slot back and finishes in the host's slow lane, and its subscription is
then known slow: its next sends (retries included) wait in that lane, which runs as many
at once as the host's own. A slow subscription whose send then fails is hung: once that
lane queues as many again, its sends fail at once. So a host holds at most three times
``NOTIFY_PER_DESTINATION`` workers, hung subscriptions neither delay the others on their
host nor grow the notifier's memory, and one that is slow but answers loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, close_old_connections, reset_queries, transaction
from django.db.models import F
from django.utils import timezone

from contract.events import (
    DeliveryStatus,
    EventValidationError,
    OrderStatus,
    OrderStatusChanged,
    Topic,
    now_ms,
    parse_event,
)
from tracker.cache import maps
from tracker.notifications import metrics, selectors, services
from tracker.notifications.channels import Channel, Job, Outcome, Result
from tracker.notifications.models import (
    Channel as ChannelName,
)
from tracker.notifications.models import (
    Delivery,
    DeliveryState,
    PushSubscription,
    ToldWindow,
)
from tracker.notifications.moments import MOMENT_OF_STATUS, Moment
from tracker.notifications.payload import LockScreen, Window
from tracker.orders.models import Order
from tracker.sharing.tokens import digest  # the log's target hashed: no address in its key
from tracker.tracking import eta

log = logging.getLogger(__name__)

#: The topics the notifier follows: statuses decide the milestones, couriers' points on the
#: road decide "running late".
TOPICS = (Topic.ORDER_STATUSES, Topic.DELIVERY_STATUSES)
#: Orders on the road remembered (when last checked, the window told): more than in flight.
ORDERS_REMEMBERED = 100_000
#: A window told is re-read after this long: another replica (after a rebalance) may have
#: moved it; this one's own writes drop it at once.
TOLD_MEMORY_SECONDS = 60.0
#: Jobs waiting for a slot, in all: beyond it a job fails at once ("queue full") rather than
#: grow memory without bound behind a dead destination.
MAX_PENDING = 100_000
#: The longest backoff between tries, whatever ``Retry-After`` asks.
MAX_BACKOFF_SECONDS = 60.0
#: Subscriptions known slow (a push outlived ``NOTIFY_SLOW_SECONDS``) or hung (then failed)
#: are remembered this long, or until one of their pushes succeeds, and this many at most.
SLOW_MEMORY_SECONDS, SLOW_REMEMBERED = 600.0, 100_000
SLOW, HUNG = "slow", "hung"


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True)
class Decision:
    """A moment of an order, decided from one record."""

    order_id: int
    moment: Moment
    status: str
    at_ms: int
    occurrence: int = 0
    window: Window | None = None


def _status_of(moment: Moment) -> str:
    for status, known in MOMENT_OF_STATUS.items():
        if known is moment:
            return status
    return OrderStatus.OUT_FOR_DELIVERY.value  # running late: on the road


def _order(order_id: int) -> Order | None:
    return Order.objects.select_related("customer__user", "restaurant").filter(pk=order_id).first()


def _tell_window(order: Order, at_ms: int) -> Window | None:
    """The window told at pickup: the first one decided stays (a redelivery, a replica)."""
    told = ToldWindow.objects.filter(order_id=order.pk).first()
    if told is None:
        trip = eta.Trip.of_order(order, OrderStatus.OUT_FOR_DELIVERY.value, at_ms)
        prediction = eta.predict(trip, eta.current_statistics(), at_ms)
        if prediction is None:
            return None
        told, _ = ToldWindow.objects.get_or_create(
            order_id=order.pk,
            defaults={"earliest": prediction.earliest, "latest": prediction.latest},
        )
    return Window(told.earliest, told.latest)


def decide_status(event: OrderStatusChanged) -> Decision | None:
    moment = MOMENT_OF_STATUS.get(event.status)
    if moment is None:
        return None
    return Decision(event.order_id, moment, event.status, event.event_time)


def late_by(event: DeliveryStatus, told: ToldWindow) -> tuple[int, Window] | None:
    """How far (ms) the arrival predicted from this point is past the latest time told,
    with the new window, when beyond the margin; else None."""
    if event.status != OrderStatus.OUT_FOR_DELIVERY.value:
        return None
    at = event.event_time
    prediction = eta.predict(eta.Trip.of_delivery(event), eta.current_statistics(), at)
    if prediction is None:
        return None
    late = prediction.arrives_at - told.latest
    if late <= settings.NOTIFY_LATE_MARGIN_SECONDS * 1000:
        return None
    return late, Window(prediction.earliest, prediction.latest)


@dataclass
class Task:
    """One row of the log being sent: its job, where it goes, its tries."""

    row_id: int
    channel: str
    job: Job
    key: tuple[int, str]  # (order, target): one order's notifications to one target in order
    decided_ms: int
    subscription_id: int | None = None
    tries: int = 0
    destination: str = field(init=False)
    #: The lane it runs or waits in: its destination, or the destination's slow lane.
    lane: str = field(init=False, default="")
    #: Shed: a hung subscription's, its lane full: it fails without a request.
    shed: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.destination = self.job.destination


def _slow_lane(destination: str) -> str:
    return f"{destination} (slow)"


class Dispatcher:
    """Runs tasks on a bounded pool with per-destination limits and per-target order
    (the module docstring says how a hung subscription is kept from the others)."""

    def __init__(self, channels: dict[str, Channel], *, on_done: Callable[[], None] = lambda: None):
        self.channels = channels
        self._pool = ThreadPoolExecutor(settings.NOTIFY_WORKERS, thread_name_prefix="notify")
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()
        self._waiting: dict[str, deque[Task]] = {}
        self._behind: dict[tuple[int, str], deque[Task]] = {}
        self._pending = 0
        self._timers: set[threading.Timer] = set()
        self.in_flight: set[int] = set()  # row ids: the sweep leaves them alone
        self._on_done = on_done
        self._closed = False
        #: Sends running in a destination's own lane: row id -> (monotonic start, task).
        self._started: dict[int, tuple[float, Task]] = {}
        #: Push endpoints known slow or hung (:data:`SLOW`, :data:`HUNG`).
        self._slow = maps.expiring(SLOW_REMEMBERED, SLOW_MEMORY_SECONDS)  # under self._lock
        self._stopping = threading.Event()
        threading.Thread(target=self._watch, name="notify-watch", daemon=True).start()

    def submit(self, task: Task) -> None:
        with self._lock:
            if self._pending >= MAX_PENDING:
                full = True
            else:
                full = False
                self._pending += 1
                self.in_flight.add(task.row_id)
                if task.key in self._behind:
                    self._behind[task.key].append(task)
                else:
                    self._behind[task.key] = deque()
                    self._start(task)
        if full:
            _finish(task, Outcome(Result.FAILED, "queue full"))

    def _start(self, task: Task) -> None:  # with the lock held
        if self._closed:
            return  # stopping: the row stays sending, and the next notifier's sweep sends it
        known = self._slow.get(task.job.address) if task.channel == ChannelName.PUSH else None
        task.lane = _slow_lane(task.destination) if known else task.destination
        limit = settings.NOTIFY_PER_DESTINATION
        waiting = self._waiting.setdefault(task.lane, deque())
        if self._running[task.lane] < limit or (known == HUNG and len(waiting) >= limit):
            task.shed = self._running[task.lane] >= limit  # its lane full: fail, no request
            self._running[task.lane] += 1
            self._watch_if_fast(task)
            self._pool.submit(self._run, task)
        else:
            waiting.append(task)

    def _watch_if_fast(self, task: Task) -> None:  # with the lock held
        """A push in its host's own lane is watched for slowness (:meth:`_watch`)."""
        if task.channel == ChannelName.PUSH and task.lane == task.destination:
            self._started[task.row_id] = (time.monotonic(), task)

    def _watch(self) -> None:
        """Moves sends that outlive ``NOTIFY_SLOW_SECONDS`` to their host's slow lane (room
        for as many again), freeing their host's slots for the other subscriptions."""
        while not self._stopping.wait(min(0.1, settings.NOTIFY_SLOW_SECONDS / 2)):
            with self._lock:
                due = time.monotonic() - settings.NOTIFY_SLOW_SECONDS
                for row_id, (began, task) in list(self._started.items()):
                    slow = _slow_lane(task.destination)
                    if began > due or self._running[slow] >= 2 * settings.NOTIFY_PER_DESTINATION:
                        continue  # not slow yet, or the host hangs as a whole: it keeps its lane
                    del self._started[row_id]
                    self._slow[task.job.address] = SLOW
                    self._running[task.lane] -= 1
                    self._running[slow] += 1
                    lane, task.lane = task.lane, slow
                    self._next(lane)

    def known_slow(self, address: str) -> bool:
        """Whether a push to this subscription outlived ``NOTIFY_SLOW_SECONDS`` lately."""
        with self._lock:
            return address in self._slow

    def _next(self, lane: str) -> None:  # with the lock held
        """Start what waits in ``lane`` while it has room."""
        waiting = self._waiting.get(lane)
        while (
            waiting and not self._closed and self._running[lane] < settings.NOTIFY_PER_DESTINATION
        ):
            nxt = waiting.popleft()
            self._running[lane] += 1
            self._watch_if_fast(nxt)
            self._pool.submit(self._run, nxt)

    def _run(self, task: Task) -> None:
        retry_in = None
        try:
            if task.shed:
                _finish(task, Outcome(Result.FAILED, "not answering: its slow lane is full"))
                return
            task.tries += 1
            outcome = self._send(task)
            if task.lane != task.destination:  # slow: answering again, or hung
                with self._lock:
                    if outcome.result is Result.SENT:
                        self._slow.pop(task.job.address, None)
                    elif outcome.result is Result.RETRY:
                        self._slow[task.job.address] = HUNG
            if outcome.result is Result.RETRY and task.tries < settings.NOTIFY_MAX_TRIES:
                metrics.RETRIED.labels(task.channel).inc()
                backoff = settings.NOTIFY_RETRY_SECONDS * 2 ** (task.tries - 1)
                retry_in = min(MAX_BACKOFF_SECONDS, max(backoff, outcome.retry_after or 0))
                _touch(task, outcome)
            else:
                _finish(task, outcome)
        except Exception as exc:  # noqa: BLE001 - one bad send never stops the notifier
            log.exception("notifier: sending row %s failed", task.row_id)
            _finish(task, Outcome(Result.FAILED, f"{type(exc).__name__}: {exc}"[:200]))
        finally:
            close_old_connections()
            reset_queries()  # with debug on, a thread's connection logs every query: not here
            self._after(task, retry_in)

    def _send(self, task: Task) -> Outcome:
        if task.channel == ChannelName.PUSH:
            found = (
                PushSubscription.objects.select_related("user")
                .filter(pk=task.subscription_id)
                .first()
            )
            if found is None:
                return Outcome(Result.GONE, "subscription deleted")
            if not services.still_sealed(found, found.user):
                found.delete()
                return Outcome(Result.GONE, "password changed or user deactivated")
        return self.channels[task.channel].send(task.job)

    def _after(self, task: Task, retry_in: float | None) -> None:
        with self._lock:
            self._started.pop(task.row_id, None)
            self._running[task.lane] -= 1
            self._next(task.lane)
            if retry_in is not None and not self._closed:
                timer = threading.Timer(retry_in, self._again, args=(task,))
                timer.daemon = True
                self._timers.add(timer)
                timer.start()
                return
            self._pending -= 1
            self.in_flight.discard(task.row_id)
            behind = self._behind.get(task.key)
            if behind:
                self._start(behind.popleft())
            else:
                self._behind.pop(task.key, None)
        self._on_done()

    def _again(self, task: Task) -> None:
        with self._lock:
            self._timers = {t for t in self._timers if t.is_alive()}
            if not self._closed:
                self._start(task)

    def in_flight_ids(self) -> list[int]:
        with self._lock:
            return list(self.in_flight)

    def idle(self) -> bool:
        with self._lock:
            return self._pending == 0

    def close(self) -> None:
        self._stopping.set()
        with self._lock:
            self._closed = True
            for timer in self._timers:
                timer.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)


def _touch(task: Task, outcome: Outcome) -> None:
    Delivery.objects.filter(pk=task.row_id).update(
        attempts=task.tries, detail=outcome.detail[:200], updated_at=timezone.now()
    )


_STATE = {
    Result.SENT: DeliveryState.SENT,
    Result.GONE: DeliveryState.GONE,
    Result.RETRY: DeliveryState.FAILED,  # out of tries
    Result.FAILED: DeliveryState.FAILED,
    Result.UNKNOWN: DeliveryState.UNKNOWN,
}


def _finish(task: Task, outcome: Outcome) -> None:
    """Write the row's end and count it; a gone subscription is deleted."""
    now = timezone.now()
    Delivery.objects.filter(pk=task.row_id).update(
        state=_STATE[outcome.result], attempts=task.tries, detail=outcome.detail[:200],
        updated_at=now,
    )  # fmt: skip
    if outcome.result is Result.SENT:
        metrics.SENT.labels(task.channel).inc()
        metrics.DELAY.labels(task.channel).observe(max(0, now_ms() - task.decided_ms) / 1000)
        if task.subscription_id:
            PushSubscription.objects.filter(pk=task.subscription_id).update(last_success_at=now)
        return
    reason = {Result.GONE: "gone", Result.UNKNOWN: "unknown"}.get(outcome.result, "refused")
    if outcome.result is Result.RETRY:
        reason = "retries"
    metrics.FAILED.labels(task.channel, reason).inc()
    if task.subscription_id and outcome.result is Result.GONE:
        services.forget_gone(task.subscription_id)
    elif task.subscription_id:
        PushSubscription.objects.filter(pk=task.subscription_id).update(
            last_failure_at=now, last_failure=outcome.detail[:200]
        )
    log.info("notifier: row %s %s: %s", task.row_id, outcome.result.value, outcome.detail)


class Notifier:
    """Decides moments from records and hands their sends to a :class:`Dispatcher`."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        #: Orders checked for "running late" lately: their points are skipped until it expires.
        self._checked = maps.expiring(ORDERS_REMEMBERED, settings.NOTIFY_LATE_CHECK_SECONDS)
        #: The window told of an order on the road (None: none told), as last read.
        self._told = maps.expiring(ORDERS_REMEMBERED, TOLD_MEMORY_SECONDS)

    # -- deciding --------------------------------------------------------------

    def handle(self, records: Iterable[tuple[Topic, bytes | None, bytes]]) -> None:
        """One poll's records (topic, key, value), in order; returns once every row they
        need is in the log (so their offsets may be committed). With debug on (``make run``)
        Django logs each query of a connection, up to 9,000, as a web request would clear
        them: a long-lived thread clears them itself, here and after each send."""
        try:
            self._handle(records)
        finally:
            reset_queries()

    def _handle(self, records: Iterable[tuple[Topic, bytes | None, bytes]]) -> None:
        for topic, key, value in records:
            if topic is Topic.DELIVERY_STATUSES and self._checked_lately(key):
                continue
            try:
                event = parse_event(topic, value)
            except (EventValidationError, ValueError) as exc:
                log.warning("notifier: skipping a record of %s: %s", topic, exc)
                continue
            if isinstance(event, OrderStatusChanged):
                decision = decide_status(event)
                if decision is not None:
                    self._plan(decision)
            elif isinstance(event, DeliveryStatus):
                self._maybe_late(event)

    def _checked_lately(self, key: bytes | None) -> bool:
        """Whether the point's order (its key) was checked within the interval; if not, it
        counts as checked now."""
        try:
            order_id = int(key)
        except (TypeError, ValueError):
            return False  # parsed, and refused there if it is no record of ours
        if order_id in self._checked:
            return True
        self._checked[order_id] = True
        return False

    def _told_window(self, order_id: int) -> ToldWindow | None:
        try:
            return self._told[order_id]
        except KeyError:
            told = self._told[order_id] = ToldWindow.objects.filter(order_id=order_id).first()
            return told

    def _maybe_late(self, event: DeliveryStatus) -> None:
        if event.status != OrderStatus.OUT_FOR_DELIVERY.value:
            return
        told = self._told_window(event.order_id)
        if told is None:
            return
        found = late_by(event, told)
        if found is None:
            return
        _, window = found
        self._told.pop(event.order_id, None)  # moved here, or by another: read it again
        with transaction.atomic():
            moved = ToldWindow.objects.filter(order_id=told.order_id, slips=told.slips).update(
                earliest=window.earliest, latest=window.latest, slips=F("slips") + 1
            )
            if not moved:
                return  # another record (or replica) announced this slip
            decision = Decision(
                event.order_id, Moment.RUNNING_LATE, OrderStatus.OUT_FOR_DELIVERY.value,
                event.event_time,
                occurrence=told.slips + 1, window=window,
            )  # fmt: skip
            tasks = self._claim(decision)
        for task in tasks:
            self.dispatcher.submit(task)

    def _plan(self, decision: Decision) -> None:
        with transaction.atomic():
            tasks = self._claim(decision)
        for task in tasks:
            self.dispatcher.submit(task)

    # -- the log ---------------------------------------------------------------

    def _claim(self, decision: Decision) -> list[Task]:
        """Write the decision's rows; the tasks for the rows this call created."""
        order = _order(decision.order_id)
        if order is None:
            return []
        customer = order.customer
        prefs = selectors.preferences_of(customer)
        if decision.moment.value not in prefs.moments:
            return []
        if decision.moment is Moment.OUT_FOR_DELIVERY and decision.window is None:
            decision = replace(decision, window=_tell_window(order, decision.at_ms))
            self._told.pop(order.pk, None)  # told now: its points read it again
        payload = LockScreen.of(
            order.pk, decision.moment, decision.status, decision.at_ms, decision.window
        )
        dropped = now_ms() - decision.at_ms > settings.NOTIFY_MAX_AGE_SECONDS * 1000
        state = DeliveryState.DROPPED if dropped else DeliveryState.SENDING
        targets: list[tuple[str, Job, PushSubscription | None]] = []
        if prefs.push_enabled:
            for sub in selectors.subscriptions_of(customer.user):
                job = Job(payload, decision.moment, sub.endpoint, sub.p256dh, sub.auth)
                targets.append((ChannelName.PUSH, job, sub))
        email = customer.user.email
        if prefs.email_enabled and email:
            job = Job(payload, decision.moment, email, user_id=customer.user_id)
            targets.append((ChannelName.EMAIL, job, None))
        tasks = []
        for channel, job, sub in targets:
            if not dropped:  # what a stopped notifier left of this order, first: in order
                tasks += self._take_over(order.pk, channel, digest(job.address))
            try:
                with transaction.atomic():
                    row = Delivery.objects.create(
                        order_id=order.pk, moment=decision.moment.value,
                        occurrence=decision.occurrence, channel=channel,
                        target=digest(job.address), customer=customer, subscription=sub,
                        state=state, decided_from=_at(decision.at_ms),
                    )  # fmt: skip
            except IntegrityError:
                continue  # logged before: by a redelivery, a restart or another replica
            if dropped:
                metrics.DROPPED.labels(channel).inc()
                continue
            tasks.append(
                Task(row.pk, channel, job, (order.pk, row.target), decision.at_ms,
                     subscription_id=sub.pk if sub else None)
            )  # fmt: skip
        return tasks

    # -- after a crash -----------------------------------------------------------

    def _take_over(self, order_id: int, channel: str, target: str) -> list[Task]:
        """The order's earlier rows to this target that a stopped notifier left sending,
        taken over now (before the lease runs out), so a restart keeps the order's moments
        in order on the device: pushes sent again, emails counted unknown."""
        left = Delivery.objects.filter(
            order_id=order_id, channel=channel, target=target, state=DeliveryState.SENDING
        ).exclude(pk__in=self.dispatcher.in_flight_ids())
        return [task for row in left.order_by("id") if (task := self._adopt(row)) is not None]

    def _adopt(self, row: Delivery) -> Task | None:
        """Take one row a stopped notifier left sending: a push to send again, or None."""
        if row.channel == ChannelName.EMAIL:
            if Delivery.objects.filter(pk=row.pk, state=DeliveryState.SENDING).update(
                state=DeliveryState.UNKNOWN, detail="a notifier stopped during SMTP"
            ):
                metrics.FAILED.labels("email", "unknown").inc()
            return None
        claimed = Delivery.objects.filter(
            pk=row.pk, state=DeliveryState.SENDING, updated_at=row.updated_at
        ).update(updated_at=timezone.now())
        if not claimed:
            return None  # another replica took it
        task = self._resend(row)
        if task is None:
            Delivery.objects.filter(pk=row.pk).update(
                state=DeliveryState.GONE, detail="subscription deleted"
            )
        return task

    def sweep(self) -> int:
        """Rows a stopped notifier left as sending: pushes are sent again, emails counted
        unknown (the conversation may have gone through). How many were taken over."""
        lease = timezone.now() - timedelta(seconds=settings.NOTIFY_SENDING_LEASE_SECONDS)
        stale = Delivery.objects.filter(state=DeliveryState.SENDING, updated_at__lt=lease)
        taken = 0
        for row in stale.exclude(pk__in=self.dispatcher.in_flight_ids()).order_by("id")[:1000]:
            task = self._adopt(row)
            if task is not None:
                taken += 1
                self.dispatcher.submit(task)
        return taken

    def _resend(self, row: Delivery) -> Task | None:
        sub = PushSubscription.objects.filter(pk=row.subscription_id).first()
        if sub is None:
            return None
        moment = Moment(row.moment)
        window = None
        if moment in (Moment.OUT_FOR_DELIVERY, Moment.RUNNING_LATE):
            told = ToldWindow.objects.filter(order_id=row.order_id).first()
            window = Window(told.earliest, told.latest) if told else None
        at_ms = int(row.decided_from.timestamp() * 1000)
        payload = LockScreen.of(row.order_id, moment, _status_of(moment), at_ms, window)
        job = Job(payload, moment, sub.endpoint, sub.p256dh, sub.auth)
        return Task(row.pk, ChannelName.PUSH, job, (row.order_id, row.target), at_ms,
                    subscription_id=sub.pk, tries=row.attempts)  # fmt: skip

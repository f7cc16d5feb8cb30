"""The outbox relay: publishes outbox rows to Kafka, in order, and marks them sent.

Guarantees, and how:

* **Nothing lost.** A row is marked published only after the broker
  acknowledged it (acks=all); anything else is retried with exponential backoff
  while the API keeps accepting writes into the outbox.
* **In order per order.** Rows are read in primary-key order and produced with
  the idempotent producer keyed by order id, so one order's events land in one
  partition in commit order; librdkafka's idempotence keeps retries gapless.
* **Once per event id.** The idempotent producer never duplicates its own
  retries; a row is re-sent only if its acknowledgement was lost (then with
  the same event id), and every consumer treats an event id it has seen as a
  no-op.
* **Nothing unaccounted in a dropped producer.** Every batch ends with each
  record acknowledged, refused, or purged (:meth:`Relay._settle`), even when the
  producer refuses a record half-way through the batch, and the producer is
  settled again before an outage replaces it. A record that timed out or was
  purged while in flight may have been written all the same: its row is
  retried and counted in ``Relay.in_doubt``, the one way a consumer can see an
  outbox event twice, with the same event id (docs/reliability.md).
* **Rebuildable topics.** :meth:`Relay.replay` un-marks rows from a point in
  time so they are published again. The relay does this by itself when the
  broker comes back empty (its data deleted, a cluster rebuilt, or a ``make run``
  on a database older than its Kafka data).

**Several relays, one at a time.** Order across relays needs one publisher at a
time: a relay that took rows 101-200 while another still flushes 1-100 could put
an order's later event first. On PostgreSQL each batch runs in a transaction
holding an advisory lock (``pg_try_advisory_xact_lock``) from reading the rows to
stamping them, so extra relays are hot standbys that take over within a poll
interval; ``SKIP LOCKED`` row claiming was rejected because it gives up exactly
that per-order order. On SQLite (one machine, embedded mode) run one relay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import datetime, timedelta

from confluent_kafka import KafkaError, KafkaException
from django.conf import settings
from django.db import (
    DatabaseError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import F
from django.utils import timezone

from contract.events import Topic, topic_name
from runtime import kafka
from runtime.conf import kafka_config
from tracker.outbox import wakeup
from tracker.outbox.models import OutboxEvent

log = logging.getLogger(__name__)

#: A topic only the relay creates; its absence means the broker lost its data.
MARKER_TOPIC = "_outbox_relay_marker"
#: The PostgreSQL advisory lock of the publishing relay (any constant; "outbox" in ASCII).
ADVISORY_LOCK_KEY = 0x6F7574626F78

#: Refusals of a record for what it is (too large, malformed): no retry can help, so the
#: relay skips the row (stamped, with the reason, and counted) instead of stopping on it.
RECORD_ERRORS = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG}
)
SKIPPED_PREFIX = "skipped, never published: "


class Relay:
    """The writer of ``published_at`` (one relay at a time): moves committed outbox rows to Kafka.

    Writes commit to the database only, so a broker outage never fails a request;
    the relay catches up afterwards, oldest row first, and marks a row published
    only once the broker has acknowledged it.
    """

    def __init__(
        self,
        batch_size: int | None = None,
        poll_seconds: float | None = None,
        max_backoff: float = 5.0,
        delivery_timeout: float = 10.0,
        idle_seconds: float | None = None,
    ) -> None:
        self.batch_size = batch_size or settings.OUTBOX_RELAY_BATCH_SIZE
        #: How long an idle relay waits between looks at the outbox: ``idle_seconds``
        #: while commits wake it (:mod:`tracker.outbox.wakeup`), ``poll_seconds`` otherwise.
        self.poll_seconds = (
            poll_seconds if poll_seconds is not None else settings.OUTBOX_RELAY_POLL_SECONDS
        )
        self.idle_seconds = (
            idle_seconds if idle_seconds is not None else settings.OUTBOX_RELAY_IDLE_SECONDS
        )
        self.max_backoff = max_backoff
        self.delivery_timeout = delivery_timeout
        self._producer = None
        self._topics_ready = False
        self.published_total = 0
        self.standby_batches = 0  # batches skipped because another relay was publishing
        self.outages = 0  # times the broker could not be reached or did not acknowledge
        #: Records given up while in flight: retried, so possibly written twice (same id).
        self.in_doubt = 0
        #: Rows skipped because the broker can never take them, by reason.
        self.skipped: Counter[str] = Counter()
        #: Rows not published yet and the age of the oldest (s), measured by :meth:`run`.
        self.backlog = 0
        self.oldest_age = 0.0
        self._measured_at = 0.0

    @property
    def producer(self):
        if self._producer is None:
            self._producer = kafka.producer(
                **{"message.timeout.ms": int(self.delivery_timeout * 1000)}
            )
        return self._producer

    def _prepare_topics(self) -> None:
        """Create the topics; if the broker lost its data (it restarted), replay everything.

        The relay never produces to its marker topic, so the marker cannot be
        auto-created by a produce: when it is missing, the broker is new or empty.
        """
        marker = topic_name(MARKER_TOPIC)
        broker_topics = self.producer.list_topics(timeout=3).topics  # its own connection
        if marker in broker_topics and self._topics_ready:
            return
        if marker not in broker_topics:
            kafka.ensure_topics([*Topic, MARKER_TOPIC])
            if (
                self._topics_ready
                or OutboxEvent.objects.filter(published_at__isnull=False).exists()
            ):
                since = timezone.now() - timedelta(milliseconds=kafka_config().retention_ms)
                replayed = self.replay(since=since)
                log.warning(
                    "broker has lost its data: replaying %d outbox events since %s "
                    "(KAFKA_RETENTION_MS)",
                    replayed,
                    since.isoformat(timespec="seconds"),
                )
        self._topics_ready = True

    def publish_batch(self, check_topics: bool = False) -> int:
        """Publish the oldest unpublished rows; return how many the broker acknowledged.

        Raises KafkaException when any row of the batch was not acknowledged
        (those rows stay unpublished and are retried by the caller). On PostgreSQL,
        returns 0 at once while another relay holds the publishing lock.

        The topics are checked (:meth:`_prepare_topics`) first when ``check_topics`` or
        before the first batch, by the relay holding the lock only: a relay that read
        the broker's topics just before another created the marker and published would
        otherwise take the broker for new and replay what the other had published.
        """
        if connection.vendor != "postgresql":
            sent, unacknowledged = self._checked_publish(check_topics)
        else:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])
                    if not cursor.fetchone()[0]:
                        self.standby_batches += 1
                        return 0
                sent, unacknowledged = self._checked_publish(check_topics)
        if unacknowledged is not None:
            raise unacknowledged
        return sent

    def _checked_publish(self, check_topics: bool) -> tuple[int, KafkaException | None]:
        if check_topics or not self._topics_ready:
            self._prepare_topics()
        return self._publish_rows()

    def _publish_rows(self) -> tuple[int, KafkaException | None]:
        """Publish one batch: how many rows it settled (acknowledged or skipped), and the
        error to raise once the transaction has committed when any row was not
        acknowledged (returned, not raised: the marks of the delivered rows must commit)."""
        rows = list(
            OutboxEvent.objects.filter(published_at__isnull=True)
            .order_by("id")
            .only("id", "topic", "key", "payload")[: self.batch_size]
        )
        if not rows:
            return 0, None
        batch = kafka.Deliveries(self.producer)
        refused: KafkaException | None = None
        skipped: list[tuple[int, str]] = []
        try:
            for row in rows:
                try:
                    batch.produce(
                        topic_name(row.topic), row.key.encode(), bytes(row.payload), tag=row.id
                    )
                except KafkaException as exc:
                    if exc.args[0].code() not in RECORD_ERRORS:
                        raise
                    batch.total -= 1  # never handed to the producer
                    skipped.append((row.id, str(exc)))
                    self.skipped[exc.args[0].name()] += 1
                    log.error("relay: skipping outbox row %d, never publishable: %s", row.id, exc)
        except KafkaException as exc:
            # Refused on the spot (producer in a fatal state): the rows produced before
            # it are in the producer; settle them below before giving up the batch.
            refused = exc
            batch.errors.setdefault(row.id, str(exc))
        finally:
            try:
                self._settle(self.producer)
            except (KafkaException, SystemError) as exc:  # fatal: the broker lost its state
                # (SystemError: confluent-kafka's flush() returning NULL as it turns fatal)
                batch.unknown_in_doubt(f"producer failed: {exc}")
                refused = refused or exc
        for row_id, reason in skipped:
            # Stamped so the relay moves on; the row keeps its payload and says why.
            OutboxEvent.objects.filter(id=row_id).update(
                published_at=timezone.now(),
                attempts=F("attempts") + 1,
                last_error=(SKIPPED_PREFIX + reason)[:1000],
            )
        if batch.in_doubt:
            self.in_doubt += len(batch.in_doubt)
            log.warning(
                "relay: %d record(s) whose fate the broker never told; their rows are retried "
                "and may reach consumers twice (same event id)",
                len(batch.in_doubt),
            )
        if batch.acked:
            self._mark_published(batch.acked, timezone.now())
        self.published_total += len(batch.acked)
        acked = set(batch.acked)
        # Rows after a refused one were never handed to the producer: untouched, retried.
        skipped_ids = {row_id for row_id, _ in skipped}
        handed = [row for row in rows if row.id not in skipped_ids][: batch.total]
        failed = [row for row in handed if row.id not in acked]
        for row in failed:
            OutboxEvent.objects.filter(id=row.id).update(
                attempts=F("attempts") + 1,
                last_error=batch.errors.get(row.id, "not acknowledged in time")[:1000],
            )
        settled = len(batch.acked) + len(skipped)
        if failed or refused is not None:
            return settled, KafkaException(
                f"{len(failed)} of {len(rows)} outbox events not acknowledged: "
                f"{next(iter(batch.errors.values()), refused or 'timeout')}"
            )
        return settled, None

    def _settle(self, prod) -> None:
        """Leave nothing in ``prod`` whose fate is unknown to this relay.

        Waits for every record's delivery report. Whatever is still inside after
        that is purged: a record still queued locally was never sent (its row is
        simply retried), while one in flight may or may not have been written by
        the broker, so its delivery report says so (``Deliveries.in_doubt``): its
        row is retried, the one case in which a consumer can see an event twice.
        """
        if prod.flush(self.delivery_timeout + 5) == 0:
            return
        prod.purge(in_queue=True, in_flight=True, blocking=False)
        prod.flush(1.0)  # runs the purged records' delivery reports

    def _retire_producer(self) -> None:
        """Drop the producer after an outage, but only once it holds nothing unaccounted."""
        prod, self._producer = self._producer, None
        if prod is not None:
            try:
                self._settle(prod)
            except (KafkaException, SystemError) as exc:  # a fatal producer cannot flush
                log.warning("relay: could not settle the old producer: %s", exc)

    def _mark_published(self, ids: list[int], now, attempts: int = 20) -> None:
        """Stamp delivered rows, retrying a busy database for a few seconds.

        Giving up would make the rows go out again (harmless: every consumer treats
        a known event id as a no-op), so it is worth waiting for a lock to clear.
        """
        for attempt in range(attempts):
            try:
                # Chunks keep the statement under SQLite's variable limit.
                for start in range(0, len(ids), 500):
                    OutboxEvent.objects.filter(id__in=ids[start : start + 500]).update(
                        published_at=now
                    )
                return
            except OperationalError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def replay(self, since: datetime | None) -> int:
        """Mark rows with ``event_time >= since`` (all when None) for publishing again."""
        rows = OutboxEvent.objects.filter(published_at__isnull=False)
        if since is not None:
            rows = rows.filter(event_time__gte=since)
        return rows.update(published_at=None)

    def _measure_backlog(self, every: float = 1.0) -> None:
        """What is still to publish (the metrics report it), at most every ``every`` s."""
        if time.monotonic() - self._measured_at < every:
            return
        self._measured_at = time.monotonic()
        pending = OutboxEvent.objects.filter(published_at__isnull=True)
        self.backlog = pending.count()
        oldest = pending.order_by("id").values_list("created_at", flat=True).first()
        self.oldest_age = (timezone.now() - oldest).total_seconds() if oldest else 0.0

    def collect(self):
        """The relay's figures for prometheus-client (``REGISTRY.register(relay)``)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield GaugeMetricFamily(
            "ordertrack_outbox_backlog_rows", "Outbox rows not published yet", self.backlog
        )
        yield GaugeMetricFamily(
            "ordertrack_outbox_oldest_unpublished_age_seconds",
            "Age of the oldest outbox row not published yet (0 when none)",
            self.oldest_age,
        )
        yield CounterMetricFamily(
            "ordertrack_outbox_published",
            "Outbox rows the broker acknowledged",
            self.published_total,
        )
        skipped = CounterMetricFamily(
            "ordertrack_outbox_skipped", "Outbox rows never publishable", labels=["reason"]
        )
        for reason, count in self.skipped.items():
            skipped.add_metric([reason], count)
        yield skipped

    def run(self, stop: threading.Event | None = None, check_topics_every: float = 2.0) -> None:
        """Relay until ``stop`` is set, backing off while the broker is unavailable."""
        stop = stop or threading.Event()
        waiter = wakeup.Waiter().open()
        try:
            self._run(stop, waiter, check_topics_every)
        finally:
            waiter.close()

    def _run(self, stop: threading.Event, waiter: wakeup.Waiter, check_topics_every: float) -> None:
        backoff = 0.1
        next_topic_check = 0.0
        while not stop.is_set():
            try:
                check_topics = time.monotonic() >= next_topic_check
                sent = self.publish_batch(check_topics)
                if check_topics:
                    next_topic_check = time.monotonic() + check_topics_every
                self._measure_backlog()
                backoff = 0.1
                if sent == 0:
                    waiter.wait(self.idle_seconds if waiter.listening else self.poll_seconds, stop)
            except KafkaException as exc:
                self.outages += 1
                log.warning("relay: broker unavailable (%s); retrying in %.1fs", exc, backoff)
                # A fresh producer after an outage (new idempotence epoch), once the old one
                # holds nothing whose fate is unknown.
                self._retire_producer()
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                next_topic_check = 0.0
            except DatabaseError as exc:
                # A busy or briefly unreachable database must not end the relay.
                log.warning("relay: database error (%s); retrying in %.1fs", exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            finally:
                close_old_connections()

"""The outbox relay: publishes outbox rows to Kafka, in order, and marks them sent.

Guarantees, and how:

* **Nothing lost.** A row is marked published only after the broker
  acknowledged it (acks=all); anything else is retried with exponential backoff
  while the API keeps accepting writes into the outbox.
* **In order per order.** Rows are read in primary-key order and produced with
  the idempotent producer keyed by order id, so one order's events land in one
  partition in commit order; librdkafka's idempotence keeps retries gapless.
* **Once per event id.** The idempotent producer never duplicates on retry; a
  row is re-sent only if its acknowledgement was lost, and every consumer
  treats an event id it has seen as a no-op.
* **Rebuildable topics.** :meth:`Relay.replay` un-marks rows from a point in
  time so they are published again. The relay does this by itself when the
  broker comes back empty (the embedded broker keeps data in memory only).

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
from datetime import datetime

from confluent_kafka import KafkaException
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

from tracker.core import kafka
from tracker.core.events import Topic, topic_name
from tracker.outbox.models import OutboxEvent

log = logging.getLogger(__name__)

#: A topic only the relay creates; its absence means the broker lost its data.
MARKER_TOPIC = "_outbox_relay_marker"
#: The PostgreSQL advisory lock of the publishing relay (any constant; "outbox" in ASCII).
ADVISORY_LOCK_KEY = 0x6F7574626F78


class Relay:
    def __init__(
        self,
        batch_size: int | None = None,
        poll_seconds: float | None = None,
        max_backoff: float = 5.0,
        delivery_timeout: float = 10.0,
    ) -> None:
        self.batch_size = batch_size or settings.OUTBOX_RELAY_BATCH_SIZE
        self.poll_seconds = (
            poll_seconds if poll_seconds is not None else settings.OUTBOX_RELAY_POLL_SECONDS
        )
        self.max_backoff = max_backoff
        self.delivery_timeout = delivery_timeout
        self._producer = None
        self._topics_ready = False
        self.published_total = 0
        self.standby_batches = 0  # batches skipped because another relay was publishing
        self.outages = 0  # times the broker could not be reached or did not acknowledge

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
        broker_topics = kafka.admin().list_topics(timeout=3).topics
        if marker in broker_topics and self._topics_ready:
            return
        if marker not in broker_topics:
            kafka.ensure_topics([*Topic, MARKER_TOPIC])
            if (
                self._topics_ready
                or OutboxEvent.objects.filter(published_at__isnull=False).exists()
            ):
                replayed = self.replay(since=None)
                log.warning("broker has lost its data: replaying %d outbox events", replayed)
        self._topics_ready = True

    def publish_batch(self) -> int:
        """Publish the oldest unpublished rows; return how many the broker acknowledged.

        Raises KafkaException when any row of the batch was not acknowledged
        (those rows stay unpublished and are retried by the caller). On PostgreSQL,
        returns 0 at once while another relay holds the publishing lock.
        """
        if connection.vendor != "postgresql":
            failure = self._publish_rows()
        else:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])
                    if not cursor.fetchone()[0]:
                        self.standby_batches += 1
                        return 0
                failure = self._publish_rows()
        if isinstance(failure, KafkaException):
            raise failure
        return failure

    def _publish_rows(self) -> int | KafkaException:
        rows = list(
            OutboxEvent.objects.filter(published_at__isnull=True)
            .order_by("id")
            .only("id", "topic", "key", "payload")[: self.batch_size]
        )
        if not rows:
            return 0
        delivered: list[int] = []
        errors: dict[int, str] = {}

        def callback(row_id: int):
            def on_delivery(err, msg) -> None:
                if err is None:
                    delivered.append(row_id)
                else:
                    errors[row_id] = str(err)

            return on_delivery

        prod = self.producer
        for row in rows:
            while True:
                try:
                    prod.produce(
                        topic_name(row.topic),
                        key=row.key.encode(),
                        value=bytes(row.payload),
                        on_delivery=callback(row.id),
                    )
                    break
                except BufferError:
                    prod.poll(0.05)
        prod.flush(self.delivery_timeout + 5)
        now = timezone.now()
        if delivered:
            self._mark_published(delivered, now)
        self.published_total += len(delivered)
        acked = set(delivered)
        failed = [row for row in rows if row.id not in acked]
        if failed:
            for row in failed:
                OutboxEvent.objects.filter(id=row.id).update(
                    attempts=F("attempts") + 1,
                    last_error=errors.get(row.id, "not acknowledged in time")[:1000],
                )
            # returned, not raised: the marks of the delivered rows must still commit
            return KafkaException(
                f"{len(failed)} of {len(rows)} outbox events not acknowledged: "
                f"{next(iter(errors.values()), 'timeout')}"
            )
        return len(delivered)

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

    def run(self, stop: threading.Event | None = None, check_topics_every: float = 2.0) -> None:
        """Relay until ``stop`` is set, backing off while the broker is unavailable."""
        stop = stop or threading.Event()
        backoff = 0.1
        next_topic_check = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= next_topic_check:
                    self._prepare_topics()
                    next_topic_check = time.monotonic() + check_topics_every
                sent = self.publish_batch()
                backoff = 0.1
                if sent == 0:
                    stop.wait(self.poll_seconds)
            except KafkaException as exc:
                self.outages += 1
                log.warning("relay: broker unavailable (%s); retrying in %.1fs", exc, backoff)
                self._producer = None  # a fresh producer after an outage: new idempotence epoch
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

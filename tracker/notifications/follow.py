"""The notifier's Kafka side: one consumer in the group ``ordertrack-position.notifier``.

A real consumer group: replicas share the partitions (one order's records stay on one
partition, so one replica decides an order's moments in order), and the group's committed
offsets are both where a restarted notifier resumes and the position pipeline health
compares with the topics' ends (:mod:`runtime.offsets` reads every ``ordertrack-position.``
group). Offsets are committed after a poll's rows are in the delivery log, at most every
``COMMIT_SECONDS`` (a record redelivered after a crash finds its rows and sends nothing).
A new group, or offsets lost with a rebuild of the topics, starts at the earliest record:
the log makes the moments already shown a no-op, and anything older than
``NOTIFY_MAX_AGE_SECONDS`` is logged as dropped.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition
from django.conf import settings
from django.db import close_old_connections

from contract.events import topic_name
from runtime import kafka
from runtime.offsets import offsets_group
from tracker.notifications.channels import Email, WebPush
from tracker.notifications.notifier import TOPICS, Dispatcher, Notifier

log = logging.getLogger(__name__)

READER = "notifier"
POLL_RECORDS = 500
#: The least time between two commits of the group's offsets: a commit per poll cost a
#: broker round trip for every few points (one a second per courier on the road).
COMMIT_SECONDS = 1.0


def _assigned(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Logged: when a (re)started notifier has its partitions, after the group's wait for
    members that are gone (a static member stays until its session times out)."""
    topics = sorted({p.topic for p in partitions})
    log.info("notifier: assigned %d partition(s) of %s", len(partitions), ", ".join(topics))


def run(stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Follow the topics until ``stop``, reconnecting after a broker failure."""
    push = WebPush()
    dispatcher = Dispatcher({"push": push, "email": Email()})
    notifier = Notifier(dispatcher)
    logical = {topic_name(topic): topic for topic in TOPICS}
    names = list(logical)
    swept_at = 0.0
    committed_at = 0.0
    try:
        while not stop.is_set():
            cons = kafka.consumer(
                **{
                    "group.id": offsets_group(READER),
                    "enable.partition.eof": False,
                    "auto.offset.reset": "earliest",
                    # Static membership: a notifier restarted (or killed and restarted) with
                    # its instance id takes its partitions back at once, without waiting
                    # for the group to notice the old member is gone.
                    "group.instance.id": settings.NOTIFIER_INSTANCE_ID,
                    "session.timeout.ms": 10_000,
                    "heartbeat.interval.ms": 1_000,
                }
            )
            try:
                cons.subscribe(names, on_assign=_assigned)
                log.info("notifier: following %s", ", ".join(names))
                if ready is not None:
                    ready.set()
                pending = False  # handled, not yet committed
                while not stop.is_set():
                    if time.monotonic() - swept_at > settings.NOTIFY_SENDING_LEASE_SECONDS / 2:
                        swept_at = time.monotonic()
                        if taken := notifier.sweep():
                            log.info("notifier: sending %d push(es) a stopped notifier left", taken)
                    first = cons.poll(0.5)
                    if first is not None:
                        batch = [first, *cons.consume(POLL_RECORDS - 1, timeout=0)]
                        records = []
                        for msg in batch:
                            err = msg.error()
                            if err is None:
                                records.append((logical[msg.topic()], msg.key(), msg.value()))
                            elif err.code() != KafkaError._PARTITION_EOF:
                                log.warning("notifier: %s", err)
                        notifier.handle(records)
                        close_old_connections()
                        pending = True
                    if pending and time.monotonic() - committed_at >= COMMIT_SECONDS:
                        cons.commit(asynchronous=False)
                        committed_at, pending = time.monotonic(), False
                if pending:
                    cons.commit(asynchronous=False)  # stopping: what was handled since
            except Exception:  # noqa: BLE001 - the notifier must outlive broker restarts
                log.exception("notifier: consumer failed; reconnecting in 1s")
                stop.wait(1.0)
            finally:
                cons.close()
    finally:
        dispatcher.close()
        push.close()

"""Knowing what the broker acknowledged: batches whose every message must be written,
and one producer per process, replaced when its broker lost its state."""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from contract.events import Event, topic_name
from runtime.conf import KafkaConfig
from runtime.kafka.clients import produce, producer

log = logging.getLogger(__name__)

#: Delivery errors after which a record may or may not be in the topic.
IN_DOUBT_ERRORS = frozenset({KafkaError._MSG_TIMED_OUT, KafkaError._PURGE_INFLIGHT})


class Undelivered(Exception):
    """The broker did not acknowledge every message of a :class:`Deliveries` batch."""

    def __init__(self, total: int, acked: list[Any], errors: dict[Any, str]) -> None:
        self.total, self.acked, self.errors = total, acked, errors
        first = next(iter(errors.values()), "not acknowledged in time")
        super().__init__(f"{total - len(acked)} of {total} messages not acknowledged: {first}")


class Deliveries:
    """One batch of messages: produce each, flush once, then know which the broker
    acknowledged (acks=all). Whoever must not lose a message (the outbox relay, the
    courier telemetry, the stream sink) checks with :meth:`flush`, which raises
    :class:`Undelivered` unless every message was acknowledged.

    Each message carries a ``tag`` (an outbox row id, an index) so the caller
    learns which ones to retry: ``acked`` lists their tags, ``errors`` maps a tag
    to the broker's error.
    """

    def __init__(self, prod: Producer) -> None:
        self.producer = prod
        self.total = 0
        self.acked: list[Any] = []
        self.errors: dict[Any, str] = {}
        #: tags whose fate the broker never told (timed out or purged in flight): they
        #: may have been written, so a retry can duplicate them (same event id).
        self.in_doubt: list[Any] = []
        self._tags: list[Any] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes, tag: Any = None, **extra: Any
    ) -> None:
        """Queue one message (``extra``: as :func:`produce`)."""
        tag = self.total if tag is None else tag
        self.total += 1
        self._tags.append(tag)

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.acked.append(tag)
            elif err.code() in IN_DOUBT_ERRORS:
                self.in_doubt.append(tag)
                self.errors[tag] = f"in doubt (may have been written): {err}"
            else:
                self.errors[tag] = str(err)

        produce(self.producer, topic, key, value, on_delivery, **extra)

    def unknown_in_doubt(self, reason: str) -> None:
        """Count every message without a delivery report as in doubt: its producer failed
        (a fatal error once its broker lost the producer's state), so it may or may not
        have been written."""
        settled = {*self.acked, *self.errors}
        for tag in self._tags:
            if tag not in settled:
                self.in_doubt.append(tag)
                self.errors[tag] = f"in doubt ({reason})"

    def publish(self, event: Event, tag: Any = None) -> None:
        """Queue ``event`` on its topic, keyed by order id (see the event contract)."""
        self.produce(topic_name(event.TOPIC), event.key(), event.to_json(), tag)

    def flush(self, timeout: float) -> list[Any]:
        """Wait up to ``timeout`` seconds for every acknowledgement; the acked tags, or
        :class:`Undelivered` (whose ``acked`` still says which ones made it)."""
        try:
            self.producer.flush(timeout)
        except (KafkaException, SystemError) as exc:
            # SystemError: confluent-kafka's flush() can return NULL without an exception
            # when the producer turns fatal during the call.
            self.unknown_in_doubt(f"producer failed: {exc}")
        if len(self.acked) < self.total:
            raise Undelivered(self.total, list(self.acked), dict(self.errors))
        return list(self.acked)


class SharedProducer:
    """One producer shared by a process's threads, replaced when it stops delivering.

    A producer whose broker lost its state (a broker's data deleted, a cluster
    rebuilt) may refuse every record from then on (``PRODUCER_FENCED``,
    ``UNKNOWN_PRODUCER_ID``, ``OUT_OF_ORDER_SEQUENCE``, a fatal error) or time them all
    out. Whoever sees a batch fail calls :meth:`replace`; the next caller gets a new
    producer (a new producer id), and the failed batch's records are retried by the
    caller, which knows which were acknowledged.
    """

    def __init__(self, config: KafkaConfig | None = None, **overrides: object) -> None:
        self.config = config
        self.overrides = overrides
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self.replaced = 0

    def get(self) -> Producer:
        """The producer (created on first use)."""
        with self._lock:
            if self._producer is None:
                self._producer = producer(self.config, **self.overrides)
            return self._producer

    def replace(self, broken: Producer) -> None:
        """Stop using ``broken`` (once, however many threads saw it fail)."""
        with self._lock:
            if self._producer is not broken:
                return
            self._producer = None
            self.replaced += 1
        log.warning("producer stopped delivering; replaced by a new one")
        try:
            # Records other threads still have inside get a delivery report (an error):
            # their callers retry them.
            broken.purge(in_queue=True, in_flight=True, blocking=False)
            broken.flush(1.0)
        except KafkaException as exc:
            log.warning("could not settle the replaced producer: %s", exc)

"""Writing to the outbox: the only way an event of the system of record is emitted."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction

from contract.events import Event
from tracker.outbox import wakeup
from tracker.outbox.models import OutboxEvent


def enqueue(event: Event) -> OutboxEvent:
    """Record ``event`` for the relay; must run inside the caller's transaction.

    Refusing to run in autocommit mode is the point of the outbox: the event and
    the change it describes commit together or not at all.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("outbox.enqueue() must run inside transaction.atomic()")
    row = OutboxEvent.objects.create(
        event_id=event.event_id,
        topic=event.TOPIC.value,
        key=event.key().decode(),
        payload=event.to_json(),
        event_time=datetime.fromtimestamp(event.event_time / 1000, tz=UTC),
    )
    wakeup.announce()
    return row

"""The transactional outbox: events written in the same transaction as the data.

A row here is the promise that its event will reach Kafka. The relay
(:mod:`tracker.outbox.relay`) publishes rows in primary-key order and stamps
``published_at``; rows are kept so the topics can be rebuilt from any point in
time (a broker that lost its data, a cluster rebuilt).
"""

from __future__ import annotations

from django.db import models


class OutboxEvent(models.Model):
    """One event waiting for (or already given to) Kafka, written in the same transaction as
    the change it announces.

    ``payload`` is the contract's serialized event, ``key`` its partition key (the order id).
    The relay publishes rows in ``id`` order and stamps ``published_at``; ``attempts`` and
    ``last_error`` tell an operator why a row is stuck. Rows stay after publishing so the
    topics can be replayed.
    """

    id = models.BigAutoField(primary_key=True)
    event_id = models.UUIDField(unique=True)
    topic = models.CharField(max_length=100)
    key = models.CharField(max_length=100)
    payload = models.BinaryField()
    event_time = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["id"],
                name="outbox_unpublished_idx",
                condition=models.Q(published_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"{self.topic}/{self.key} {self.event_id}"

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Notice(models.Model):
    """One change every process must hear about: ``topic`` says what changed (e.g.
    ``access.user``, ``copies.restaurant``), ``key`` which one (an id). Rows live for
    :data:`tracker.notices.services.KEEP_SECONDS`; listeners read the last few seconds."""

    topic = models.CharField(max_length=40)
    key = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.topic} {self.key}"

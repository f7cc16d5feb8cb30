"""Writing notices: after the change they announce has committed."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from tracker.notices.models import Notice

log = logging.getLogger(__name__)

#: How long a notice is kept: listeners read the last LOOKBACK_SECONDS (listener.py).
KEEP_SECONDS = 120


def announce(topic: str, key: int) -> None:
    """Tell every process that ``key`` of ``topic`` changed, once the caller's transaction
    commits (so a listener that acts on it reads the change; a rolled-back change
    announces nothing). Its time is then the commit's, however long the transaction."""
    transaction.on_commit(lambda: _write(topic, key))


def _write(topic: str, key: int) -> None:
    now = timezone.now()
    try:
        Notice.objects.create(topic=topic, key=key, created_at=now)
        Notice.objects.filter(created_at__lt=now - timedelta(seconds=KEEP_SECONDS)).delete()
    except Exception:  # noqa: BLE001 - the change is committed; saying so must not undo it
        log.exception("could not announce %s %s to the other processes", topic, key)

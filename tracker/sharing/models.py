"""Shared tracking links: whoever holds one may follow one order's delivery, signed in or not.

A link is stored as the digest of its token (:mod:`tracker.sharing.tokens`); the token is
shown once, to the customer who made it. A link works until the first of: it is revoked,
``SHARE_LINK_MAX_AGE`` (at most 24 hours) after it was made, and ``SHARE_LINK_GRACE`` (30
minutes) after its order was delivered or cancelled. Links are changed only through
:mod:`tracker.sharing.services`; what a link shows is :mod:`tracker.live.messages`'s
allow-list.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from contract.events import TERMINAL_STATUSES
from tracker.orders.models import Order

_ENDED = [status.value for status in TERMINAL_STATUSES]


def ends_at(expires_at: datetime, order_status: str, status_changed_at: datetime) -> datetime:
    """When a link made to expire at ``expires_at`` stops working, as its order stands:
    ``SHARE_LINK_GRACE`` after the order ended, if that comes first."""
    if order_status in _ENDED:
        return min(expires_at, status_changed_at + settings.SHARE_LINK_GRACE)
    return expires_at


class ShareLinkQuerySet(models.QuerySet):
    def live(self, now: datetime | None = None) -> ShareLinkQuerySet:
        """The links that work at ``now`` (default: now): not revoked, not past their
        ``expires_at``, and their order not ended more than ``SHARE_LINK_GRACE`` ago."""
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True, expires_at__gt=now).exclude(
            order__status__in=_ENDED,
            order__status_changed_at__lte=now - settings.SHARE_LINK_GRACE,
        )


class ShareLink(models.Model):
    """One link to follow one order, made by its customer."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="share_links")
    #: SHA-256 of the token, hexadecimal; the token itself is never stored.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField()
    #: The latest the link can work: ``SHARE_LINK_MAX_AGE`` after it was made (fixed then,
    #: so changing the setting never lengthens a link already given out).
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(expires_at__gt=models.F("created_at")),
                name="share_link_expires_after_it_is_made",
            ),
        ]

    def __str__(self) -> str:
        return f"Share link #{self.pk} of order #{self.order_id}"

    def ends_at(self) -> datetime:
        """When this link stops working, as its order stands (reads ``self.order``)."""
        return ends_at(self.expires_at, self.order.status, self.order.status_changed_at)

    def state(self, now: datetime | None = None) -> str:
        """``live``, ``revoked`` or ``expired`` (reads ``self.order``)."""
        if self.revoked_at is not None:
            return "revoked"
        return "live" if self.ends_at() > (now or timezone.now()) else "expired"

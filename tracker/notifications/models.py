"""Who is told what, where, and what was sent.

* :class:`PushSubscription`: one browser's (or installed web app's) Web Push subscription,
  a URL the notifier will call: checked when registered (:mod:`.endpoints`) and again at
  every send. It carries a seal of its user's password (:func:`.services.seal_for`): a
  password change deletes it (a ``post_save`` receiver), and one changed where no signal
  is sent (a bulk ``update``) is never sent to and is deleted at its next send.
* :class:`NotificationPreferences`: per customer, which channels and which moments; email
  is off until the customer turns it on.
* :class:`Delivery`: the delivery log, one row per (order, moment, occurrence, channel,
  target), unique, so a moment is shown at most once per device or mailbox whatever the
  notifier does (restarts, Kafka redelivery, a rebuild of the topics, two replicas).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tracker.customers.models import Customer
from tracker.notifications.moments import Moment


def all_moments() -> list[str]:
    return [moment.value for moment in Moment]


class PushSubscription(models.Model):
    """A Web Push subscription as the browser's ``PushSubscription.toJSON()`` gives it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="push_subscriptions"
    )
    #: The push service's URL for this browser; unique: one browser, one subscription.
    endpoint = models.CharField(max_length=2048, unique=True)
    #: The browser's P-256 public key (65 bytes, uncompressed point), base64url, no padding.
    p256dh = models.CharField(max_length=100)
    #: The browser's 16-byte authentication secret, base64url, no padding.
    auth = models.CharField(max_length=32)
    #: What the user sees in their list: the browser's user agent, or a label the app gave.
    label = models.CharField(max_length=200, blank=True, default="")
    #: HMAC of the user's id and password hash when registered (see the module docstring).
    seal = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_failure = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Push subscription #{self.pk} of {self.user_id}"


class NotificationPreferences(models.Model):
    """One customer's choices. Absent means the defaults: push on, email off, every moment."""

    customer = models.OneToOneField(
        Customer, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    push_enabled = models.BooleanField(default=True)
    #: Off until the customer turns it on (the issue: no mail nobody asked for).
    email_enabled = models.BooleanField(default=False)
    #: The moments (:class:`~tracker.notifications.moments.Moment` values) to be told about.
    moments = models.JSONField(default=all_moments)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "notification preferences"

    def __str__(self) -> str:
        return f"Notification preferences of customer #{self.customer_id}"


class Channel(models.TextChoices):
    PUSH = "push", "Web Push"
    EMAIL = "email", "Email"


class DeliveryState(models.TextChoices):
    #: Claimed by a notifier; for email: logged before the SMTP conversation starts.
    SENDING = "sending", "sending"
    SENT = "sent", "sent"
    #: Given up after the retry bound, or refused for good (not a 404/410).
    FAILED = "failed", "failed"
    #: The subscription is gone (404/410) or no longer fits its user's password.
    GONE = "gone", "gone"
    #: Older than NOTIFY_MAX_AGE when decided: logged, never sent.
    DROPPED = "dropped", "dropped"
    #: An email whose SMTP conversation a crash interrupted: maybe delivered, never resent.
    UNKNOWN = "unknown", "unknown"


class Delivery(models.Model):
    """One notification to one target: the row is written before anything is sent."""

    order_id = models.BigIntegerField()
    moment = models.CharField(max_length=32, choices=[(m.value, m.label) for m in Moment])
    #: 0, except for "running late": the n-th slip of the order's arrival (1, 2, ...).
    occurrence = models.PositiveIntegerField(default=0)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    #: The push endpoint's SHA-256, or the mail address's (hex): the device or mailbox.
    target = models.CharField(max_length=64)
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="+")
    #: The push subscription sent to (null for email, or once the subscription is gone).
    subscription = models.ForeignKey(
        PushSubscription, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=8, choices=DeliveryState.choices)
    attempts = models.PositiveSmallIntegerField(default=0)
    #: When the event that decided the moment happened (its ``event_time``).
    decided_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    detail = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["order_id", "moment", "occurrence", "channel", "target"],
                name="notification_shown_once",
            )
        ]
        indexes = [models.Index(fields=["state", "updated_at"])]

    def __str__(self) -> str:
        return f"{self.channel} {self.moment} of order #{self.order_id}: {self.state}"


class ToldWindow(models.Model):
    """The arrival window the customer was last told, per order: what "running late" is
    measured against. Kept in the database so a restarted notifier, or a second replica,
    measures against the same window and counts the same slips."""

    order_id = models.BigIntegerField(primary_key=True)
    earliest = models.BigIntegerField(help_text="epoch ms")
    latest = models.BigIntegerField(help_text="epoch ms")
    #: How many times the customer was told the order runs late (the next slip's number).
    slips = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Window told for order #{self.order_id} ({self.slips} slips)"

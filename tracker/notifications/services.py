"""Every write to subscriptions and preferences goes through here.

A subscription is sealed to its user's password hash (:func:`seal_for`), as API tokens
are (:func:`tracker.accounts.security.sealed_key`): a password change deletes the user's
subscriptions (:func:`forget_on_credential_change`, on every ``save`` of a user), and one
changed where no signal is sent never fits its seal again, so the notifier deletes it
instead of sending (:func:`still_sealed`). Deactivation deletes them too; signing out
everywhere (``POST /api/v1/auth/logout/``) calls :func:`forget_user`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.utils.crypto import constant_time_compare, salted_hmac

from tracker.customers.models import Customer
from tracker.notifications import endpoints
from tracker.notifications.models import NotificationPreferences, PushSubscription

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

_SEAL_SALT = "tracker.notifications.subscription-seal"


class TooManySubscriptions(Exception):
    """The user already keeps ``WEBPUSH_MAX_SUBSCRIPTIONS_PER_USER`` subscriptions."""

    field = "non_field_errors"


def seal_for(user: AbstractBaseUser) -> str:
    """HMAC (``SECRET_KEY``) of the user's id and password hash."""
    value = f"{user.pk}:{user.password}"
    return salted_hmac(_SEAL_SALT, value, algorithm="sha256").hexdigest()


def still_sealed(subscription: PushSubscription, user: AbstractBaseUser) -> bool:
    """Whether the subscription was registered under the user's current password, and the
    user is still active (the sender asks before every send)."""
    if not user.is_active:
        return False
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    value = f"{user.pk}:{user.password}"
    return any(
        constant_time_compare(
            subscription.seal,
            salted_hmac(_SEAL_SALT, value, secret=key, algorithm="sha256").hexdigest(),
        )
        for key in keys
    )


def register(
    user: AbstractBaseUser, *, endpoint: str, p256dh: str, auth: str, label: str = ""
) -> tuple[PushSubscription, bool]:
    """Keep the browser's subscription for ``user``: ``(subscription, created)``.

    The endpoint is checked again here (:func:`endpoints.resolve`; the serializer already
    did, this is the service's own guard). Registering an endpoint that is known updates its
    keys; one registered to another account moves to this one: the push service gave the
    endpoint to one browser, and whoever holds its keys now is that browser (the last
    account signed in on it)."""
    endpoints.resolve(endpoint)
    values = {
        "user": user,
        "p256dh": endpoints.check_p256dh(p256dh),
        "auth": endpoints.check_auth(auth),
        "label": label[:200],
        "seal": seal_for(user),
        "last_failure_at": None,
        "last_failure": "",
    }
    with transaction.atomic():
        mine = PushSubscription.objects.select_for_update().filter(user=user)
        known = mine.filter(endpoint=endpoint).exists()
        limit = settings.WEBPUSH_MAX_SUBSCRIPTIONS_PER_USER
        if not known and mine.count() >= limit:
            raise TooManySubscriptions(
                f"You already keep {limit} push subscriptions; delete one first."
            )
        return PushSubscription.objects.update_or_create(endpoint=endpoint, defaults=values)


def remove(user: AbstractBaseUser, subscription_id: int) -> bool:
    """Delete one of the user's subscriptions; False when there is none of theirs."""
    deleted, _ = PushSubscription.objects.filter(user=user, pk=subscription_id).delete()
    return deleted > 0


def forget_user(user: AbstractBaseUser) -> int:
    """Delete every subscription of the user (signed out everywhere); how many."""
    deleted, _ = PushSubscription.objects.filter(user=user).delete()
    return deleted


def forget_on_credential_change(sender: Any, instance: Any, raw: bool = False, **kwargs: Any):
    """``post_save`` of the user model: a user whose password changed, or who is no longer
    active, keeps no subscription (one query when nothing changed: the seal's check)."""
    if raw or kwargs.get("created"):
        return
    if not instance.is_active:
        forget_user(instance)
        return
    PushSubscription.objects.filter(user=instance).exclude(seal=seal_for(instance)).delete()


def forget_gone(subscription_id: int) -> None:
    """The push service answered 404 or 410: the browser has dropped the subscription."""
    PushSubscription.objects.filter(pk=subscription_id).delete()


def change_preferences(customer: Customer, **changes: Any) -> NotificationPreferences:
    """Save the customer's preferences with ``changes`` (push_enabled, email_enabled,
    moments) applied."""
    with transaction.atomic():
        prefs, _ = NotificationPreferences.objects.select_for_update().get_or_create(
            customer=customer
        )
        for name in ("push_enabled", "email_enabled", "moments"):
            if name in changes:
                setattr(prefs, name, changes[name])
        prefs.save()
    return prefs

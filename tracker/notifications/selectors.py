"""Reads of subscriptions and preferences, for the API and the notifier."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet

from tracker.customers.models import Customer
from tracker.notifications.models import NotificationPreferences, PushSubscription

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser


def subscriptions_of(user: AbstractBaseUser) -> QuerySet[PushSubscription]:
    """The user's own subscriptions, newest first (nobody else's, ever)."""
    return PushSubscription.objects.filter(user=user)


def preferences_of(customer: Customer) -> NotificationPreferences:
    """The customer's preferences, the defaults when never changed (not saved then)."""
    found = NotificationPreferences.objects.filter(customer=customer).first()
    return found or NotificationPreferences(customer=customer)


def chosen_moments(user: AbstractBaseUser) -> list[str] | None:
    """The moments a signed-in customer chose to be told of (their open tab announces only
    these, as the notifier pushes only these); None for anyone who is not a customer."""
    customer = customer_by_user(user.pk) if user.is_authenticated else None
    return None if customer is None else list(preferences_of(customer).moments)


def customer_by_user(user_id: int) -> Customer | None:
    """The active customer of a user id (an unsubscribe link names one)."""
    return Customer.objects.filter(user_id=user_id, user__is_active=True).first()


def notified_customer_ids() -> set[int]:
    """Customers who hear about their orders somewhere: a device subscribed to push (and
    push not turned off), or email turned on with an address to send to."""
    pushed = Q(user__push_subscriptions__isnull=False) & ~Q(
        notification_preferences__push_enabled=False
    )
    mailed = Q(notification_preferences__email_enabled=True) & ~Q(user__email="")
    return set(Customer.objects.filter(pushed | mailed).values_list("id", flat=True))

"""Reads of subscriptions and preferences, for the API and the notifier."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet

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


def customer_by_user(user_id: int) -> Customer | None:
    """The active customer of a user id (an unsubscribe link names one)."""
    return Customer.objects.filter(user_id=user_id, user__is_active=True).first()

"""Counters and leases every process shares: request budgets, sign-in attempts, socket
slots, the health check's round trip. Django's ``default`` cache (Redis in production),
reached through here so that this package is the only one that talks to a cache."""

from django.core.cache import cache

__all__ = ["cache"]

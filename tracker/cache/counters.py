"""Counters and leases every process shares: request budgets, sign-in attempts, socket
slots, the health check's round trip: Django's ``default`` cache (Redis in production);
and socket tickets, its ``tickets`` cache (Redis, or files any local process reads).
Reached through here so that this package is the only one that talks to a cache."""

from __future__ import annotations

import time

from django.core.cache import cache, caches

__all__ = ["SlidingWindow", "cache", "tickets"]

#: One-time socket tickets (``tracker.accounts.services``): redeemed by any web process.
tickets = caches["tickets"]


class SlidingWindow:
    """Uses of one budget in any window of ``period`` seconds, counted in the cache in
    buckets of a sixtieth of it (1 s for a minute).

    A fixed window would let twice the budget through across its boundary and forget a
    guesser's count whenever it turns. Each use is an atomic ``incr`` of its bucket, so the
    processes sharing the cache each count, and concurrent uses never count once."""

    SLICES = 60

    def __init__(self, key: str, period: int, now: float | None = None) -> None:
        self.key = key
        self.period = period
        self.step = max(1, period // self.SLICES)
        self.now = time.time() if now is None else now
        current = int(self.now // self.step)
        self._buckets = range(current - period // self.step, current + 1)
        self._keys = [f"{key}:{i}" for i in self._buckets]
        self.counts: list[tuple[float, int]] = []

    def count(self) -> None:
        """Count one use in the current bucket, then read the window's buckets."""
        current, timeout = self._keys[-1], self.period + self.step
        cache.add(current, 0, timeout=timeout)
        try:
            cache.incr(current)
        except ValueError:  # expired or evicted between add and incr
            cache.set(current, 1, timeout=timeout)
        found = cache.get_many(self._keys)
        self.counts = [
            (i * self.step, found.get(k, 0)) for i, k in zip(self._buckets, self._keys, strict=True)
        ]

    def take_back(self) -> None:
        """Uncount the use :meth:`count` made (a refused request that should spend nothing)."""
        cache.decr(self._keys[-1])
        start, n = self.counts[-1]
        self.counts[-1] = (start, n - 1)

    def spent(self, period: int | None = None) -> int:
        """Uses in the last ``period`` seconds (at most the window's own)."""
        return sum(n for _, n in self._within(period))

    def wait(self, limit: int, period: int | None = None) -> float:
        """Seconds until enough of the oldest uses have aged out that one more fits ``limit``."""
        period = period or self.period
        if limit <= 0:
            return float(period)
        left = self.spent(period)
        for start, n in self._within(period):
            left -= n
            if left < limit:
                return max(start + period - self.now, 1.0)
        return float(period)

    def _within(self, period: int | None) -> list[tuple[float, int]]:
        since = self.now - (period or self.period)
        return [(start, n) for start, n in self.counts if start > since]

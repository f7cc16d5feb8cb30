"""DRF throttles.

:class:`ScopedRateThrottle` identifies anonymous clients the way every other limit does:
DRF's own ``get_ident`` uses the whole client-written ``X-Forwarded-For`` unless
``NUM_PROXIES`` is set; this one asks :func:`tracker.accounts.security.client_ip`, which
trusts the header only as far as ``TRUSTED_PROXY_COUNT`` (one setting for the API,
the browser sign-in and the admin sign-in).

:class:`LocationPointsThrottle` counts a courier's GPS points, not requests.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.throttling import ScopedRateThrottle as DRFScopedRateThrottle

from tracker.accounts.security import TokenBucket, client_ip


class ScopedRateThrottle(DRFScopedRateThrottle):
    def get_ident(self, request: Request) -> str:
        return client_ip(request.META)


class ThrottledWrites:
    """A view mixin: reads are free, writes spend the view's ``throttle_scope``."""

    def get_throttles(self) -> list[BaseThrottle]:
        return [] if self.request.method in SAFE_METHODS else super().get_throttles()


class LocationPointsThrottle(BaseThrottle):
    """A courier's points budget for one order: a token bucket of ``LOCATION_POINTS_BURST``
    points (a phone's offline queue sent at once), refilled at
    ``LOCATION_POINTS_PER_SECOND``. Every point sent counts, accepted or not; a request
    over the budget takes none of it and is answered 429 with ``Retry-After``."""

    def allow_request(self, request: Request, view: Any) -> bool:
        bucket = TokenBucket(
            f"points:{request.user.pk}:{view.kwargs.get('pk')}",
            rate=settings.LOCATION_POINTS_PER_SECOND,
            burst=settings.LOCATION_POINTS_BURST,
        )
        self._wait = bucket.take(points_in(request.data))
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


def points_in(body: Any) -> int:
    """How many points a location body carries: its ``points``, else one."""
    points = body.get("points") if isinstance(body, dict) else None
    return max(1, len(points)) if isinstance(points, list) else 1

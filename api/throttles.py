"""DRF throttles: every API request spends at most one budget per kind, and says which.

* :class:`ScopedRateThrottle`: a view's ``throttle_scope`` (``API_THROTTLE_ORDERS``,
  ``_WRITES``, ``_LOCATIONS``, ``_LOGIN``), spent by its writes only.
* :class:`ReadRateThrottle`: every signed-in read, per user (``API_THROTTLE_READS``, higher
  for restaurant staff and operators: ``API_THROTTLE_READS_STAFF``).
* :class:`LocationPointsThrottle`: a courier's GPS points, not requests.

Each has ``applies(view, method)``, which the checks and the schema (the 429 it declares)
both ask. Anonymous clients are keyed the way every other limit keys them:
:func:`tracker.accounts.security.client_ip`, which trusts ``X-Forwarded-For`` only as far as
``TRUSTED_PROXY_COUNT`` (DRF's own ``get_ident`` would take the client-written header whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle
from rest_framework.throttling import ScopedRateThrottle as DRFScopedRateThrottle

from tracker.accounts.security import TokenBucket, client_ip
from tracker.cache.counters import SlidingWindow
from tracker.orders import policy

if TYPE_CHECKING:  # rest_framework.views imports this module (DEFAULT_THROTTLE_CLASSES)
    from rest_framework.views import APIView


def is_write(method: str) -> bool:
    return method not in SAFE_METHODS


class ScopedRateThrottle(DRFScopedRateThrottle):
    """The view's ``throttle_scope``, spent by writes: every scope is a write budget (reads
    have their own, :class:`ReadRateThrottle`)."""

    def applies(self, view: APIView, method: str) -> bool:
        return bool(getattr(view, self.scope_attr, None)) and is_write(method)

    def allow_request(self, request: Request, view: APIView) -> bool:
        return not self.applies(view, request.method) or super().allow_request(request, view)

    def get_ident(self, request: Request) -> str:
        return client_ip(request.META)


class ReadRateThrottle(SimpleRateThrottle):
    """A signed-in user's reads in any window of the rate's period
    (:class:`~tracker.cache.counters.SlidingWindow`): ``reads``
    (``API_THROTTLE_READS``) for customers and couriers, ``reads_staff``
    (``API_THROTTLE_READS_STAFF``) for restaurant staff and operators, whose pages and
    kitchen tablets (often several on one account) read many orders. A read is a GET,
    HEAD or OPTIONS, or a POST to a view that only carries a query in its body
    (``query_in_body = True``). Anonymous requests never get this far on the API (401);
    the public schema and docs opt out.

    One history per user, whatever the role, so staff simply go on past the ordinary
    limit; whether they may is asked only once the ordinary budget is spent, as it costs
    restaurant staff a query that a customer's read should not pay.

    A conditional read counts like any other, 304 or not. The throttle decides before the
    answer is known, and a free 304 would leave the budget open to a client repeating
    ``If-None-Match: *`` in a loop. What makes an unchanged answer nearly free is its cost
    to serve (the read path's work), not the budget; and the ordinary budget holds an app
    polling an order every 2 seconds four times over.
    """

    scope = "reads"
    staff_scope = "reads_staff"

    def __init__(self) -> None:  # DRF's parses one rate; the role picks one of two per request
        self.rates = [
            self.parse_rate(self.THROTTLE_RATES[s]) for s in (self.scope, self.staff_scope)
        ]
        self.kept = max(period for _, period in self.rates)

    def applies(self, view: APIView, method: str) -> bool:
        return not is_write(method) or getattr(view, "query_in_body", False)

    def get_cache_key(self, request: Request, view: APIView) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}

    def allow_request(self, request: Request, view: APIView) -> bool:
        """Count the read first, then decide on the window's sum: concurrent reads each
        count, and a refused one takes its count back. At the limit, racing reads may both
        be refused, never both admitted."""
        if not request.user.is_authenticated or not self.applies(view, request.method):
            return True
        self.window = SlidingWindow(self.get_cache_key(request, view), self.kept, self.timer())
        self.window.count()
        self.num_requests, self.duration = self.rates[0]
        if self.spent() > self.num_requests and holds_staff_budget(request.user):
            self.num_requests, self.duration = self.rates[1]
        if self.spent() <= self.num_requests:
            return True
        self.window.take_back()  # a refused read spends nothing
        return False

    def spent(self) -> int:
        """Reads in the current window."""
        return self.window.spent(self.duration)

    def wait(self) -> float:
        """Until enough of the oldest reads have aged out of the window that one more fits."""
        return self.window.wait(self.num_requests, self.duration)


def holds_staff_budget(user: Any) -> bool:
    """Operators and restaurant staff read on ``reads_staff``."""
    return policy.is_operator(user) or bool(policy.staff_restaurant_ids(user))


class LocationPointsThrottle(BaseThrottle):
    """A courier's points budget for one order: a token bucket of ``LOCATION_POINTS_BURST``
    points (a phone's offline queue sent at once), refilled at
    ``LOCATION_POINTS_PER_SECOND``. Every point sent counts, accepted or not; a request
    over the budget takes none of it and is answered 429 with ``Retry-After``."""

    def applies(self, view: APIView, method: str) -> bool:
        return is_write(method)

    def allow_request(self, request: Request, view: Any) -> bool:
        if not self.applies(view, request.method):
            return True
        bucket = TokenBucket(
            f"points:{request.user.pk}:{view.kwargs.get('pk')}",
            rate=settings.LOCATION_POINTS_PER_SECOND,
            burst=settings.LOCATION_POINTS_BURST,
        )
        self._wait = bucket.take(points_in(request.data))
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


def spends_budget(view: APIView, method: str) -> bool:
    """Whether a ``method`` request to ``view`` spends a budget, so may be answered 429."""
    return any(throttle.applies(view, method) for throttle in view.get_throttles())


def points_in(body: Any) -> int:
    """How many points a location body carries: its ``points``, else one."""
    points = body.get("points") if isinstance(body, dict) else None
    return max(1, len(points)) if isinstance(points, list) else 1

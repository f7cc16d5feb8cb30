"""DRF throttles that identify anonymous clients the way every other limit does.

DRF's own ``get_ident`` uses the whole client-written ``X-Forwarded-For`` unless
``NUM_PROXIES`` is set; this one asks :func:`tracker.accounts.security.client_ip`, which
trusts the header only as far as ``TRUSTED_PROXY_COUNT`` (one setting for the API,
the browser sign-in and the admin sign-in).
"""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.throttling import ScopedRateThrottle as DRFScopedRateThrottle

from tracker.accounts.security import client_ip


class ScopedRateThrottle(DRFScopedRateThrottle):
    def get_ident(self, request: Request) -> str:
        return client_ip(request.META)

"""Every URL pattern and WebSocket route has a stated budget, or "none" with the reason
(issue 53). A new endpoint fails here until its line is written: decide its throttle
then, not after a flood.

For DRF views the budget is read from the view, per method (the throttles that apply to
it: its ``throttle_scope`` for writes, the per-user read budget for reads) and must be the
one stated; Django views and pages state theirs in words. Sign-in paths must be throttled
by the login middleware.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.views import APIView

from api.throttles import ReadRateThrottle, ScopedRateThrottle
from tracker.live.consumers import TrackingSocket
from tracker.live.routing import websocket_urlpatterns
from tracker.live.share_socket import ShareSocket

SIGN_IN = "LoginThrottleMiddleware: per client (API_THROTTLE_LOGIN) and per name"
READS = "GET: reads"  # per user: API_THROTTLE_READS, or _STAFF for staff and operators
PAGE = "none: a signed-in page shell; its data comes through the API's budgets"
SHARE_PAGE = (
    "SHARE_VIEW_RATE per client address, before the token is looked up; no sign-in, its data "
    "comes through the share socket's budget"
)

BUDGETS = {
    "healthz": "none: probes call it every few seconds; two cheap checks, no data",
    "readyz": "none: probes; anonymous callers get the status only",
    "metrics": "none: the public proxy answers 404; Prometheus scrapes WEB_METRICS_PORT",
    "admin/": f"sign-in via /admin/login/ ({SIGN_IN}); every other page is staff-only",
    "api/schema/": "none: built once per process, then served from memory",
    "api/docs/": "none: a static page (Swagger UI from our own static files)",
    "api/asyncapi/": "none: a file read once per process",
    "api/v1/auth/token/": "POST: scope login",
    "api/v1/auth/logout/": "none: signed in; revokes the caller's own token and session",
    "api/v1/auth/logout-everywhere/": "none: signed in; revokes the caller's own tokens",
    "api/v1/auth/socket-ticket/": "POST: scope writes",
    "api/v1/me/": READS,
    "api/v1/me/addresses/": "GET: reads; POST: scope writes",
    "api/v1/me/addresses/<int:pk>/": (
        "GET: reads; PUT: scope writes; PATCH: scope writes; DELETE: scope writes"
    ),
    "api/v1/restaurants/": READS,
    "api/v1/restaurants/<int:pk>/menu/": READS,
    "api/v1/orders/": "GET: reads; POST: scope orders",
    "api/v1/orders/<int:pk>/": READS,
    "api/v1/orders/<int:pk>/cancel/": "POST: scope writes",
    "api/v1/orders/<int:pk>/advance/": "POST: scope writes",
    "api/v1/orders/<int:pk>/locations/": "POST: scope locations, LocationPointsThrottle",
    "api/v1/orders/<int:pk>/share/": "GET: reads; POST: scope shares; DELETE: scope shares",
    "api/v1/notifications/subscriptions/": "GET: reads; POST: scope writes",
    "api/v1/notifications/subscriptions/<int:pk>/": "GET: reads; DELETE: scope writes",
    "api/v1/notifications/preferences/": "GET: reads; PATCH: scope writes",
    "api/v1/notifications/vapid-key/": READS,
    "api/v1/notifications/unsubscribe/<str:token>/": "POST: scope writes",
    "api/v1/operations/time-in-status/": READS,
    "api/v1/operations/stuck-orders/": READS,
    "api/v1/operations/deliveries-in-area/": "POST: reads",  # a query in a body
    "api/v1/operations/dead-letters/": READS,
    "api/v1/operations/restaurant-dashboard/": READS,
    "api/v1/operations/pipeline/": READS,
    "api/v1/operations/sales-series/": READS,
    "api/^[\\s\\S]*$": "none: an unknown API path, answered 404 with no work",
    "": PAGE,
    "orders/<int:order_id>/": PAGE,
    "order/new/": PAGE,
    "addresses/": PAGE,
    "settings/notifications/": PAGE,
    "sw.js": "none: the service worker, a static file read once per process",
    "restaurant/": PAGE,
    "restaurant/board/": PAGE,
    "operations/": PAGE,
    "courier/": PAGE,
    "accounts/login/": SIGN_IN,
    "accounts/logout/": "none: ends the caller's own session",
    "t/<str:token>/": SHARE_PAGE,
    "^t/(?P<token>.+)$": SHARE_PAGE,
}

SOCKET_BUDGET = (
    "per user WS_CONNECT_RATE connects and WS_MAX_SOCKETS_PER_USER open sockets; per socket "
    "WS_PING_RATE messages of at most WS_MAX_MESSAGE_BYTES"
)
SHARE_SOCKET_BUDGET = (
    "per client address SHARE_CONNECT_RATE connects (before the token is looked up) and per "
    "link SHARE_MAX_SOCKETS_PER_LINK open sockets; per socket WS_PING_RATE messages of at "
    "most WS_MAX_MESSAGE_BYTES"
)
WEBSOCKET_BUDGETS = {
    "ws/orders/": SOCKET_BUDGET,
    "ws/orders/<int:order_id>/": SOCKET_BUDGET,
    "ws/restaurants/<int:restaurant_id>/": SOCKET_BUDGET,
    "ws/operations/": SOCKET_BUDGET,
    "ws/courier/": SOCKET_BUDGET,
    "^ws/share/(?P<token>.*)$": SHARE_SOCKET_BUDGET,
}


def _routes(patterns, prefix: str = ""):
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if route == "admin/":  # Django's admin: one budget for all of its pages
                yield route, None
            else:
                yield from _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield route, pattern.callback


METHODS = ("get", "post", "put", "patch", "delete")


def _drf_budget(callback) -> str:
    """The budgets a DRF view's methods spend, as :data:`BUDGETS` writes them."""
    view = callback.cls(**callback.initkwargs)  # as_view's arguments included
    actions = getattr(callback, "actions", None)  # a viewset: its methods' actions
    methods = [m for m in METHODS if (m in actions if actions else hasattr(view, m))]
    parts = []
    for method in methods:
        spent = [
            f"scope {view.throttle_scope}"
            if isinstance(throttle, ScopedRateThrottle)
            else "reads"
            if isinstance(throttle, ReadRateThrottle)
            else type(throttle).__name__
            for throttle in view.get_throttles()
            if throttle.applies(view, method.upper())
        ]
        if spent:
            parts.append(f"{method.upper()}: {', '.join(spent)}")
    return "; ".join(parts) or "none"


def test_every_url_pattern_has_a_stated_budget():
    routes = dict(_routes(get_resolver().url_patterns))
    missing = sorted(set(routes) - set(BUDGETS))
    assert not missing, f"state a throttle (or 'none: why') for {missing}"
    assert not set(BUDGETS) - set(routes), "a stated budget for a route that is gone"
    for route, callback in routes.items():
        stated = BUDGETS[route]
        view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        if view is not None and issubclass(view, APIView):
            spent = _drf_budget(callback)
            expected = "none" if stated.startswith("none:") else stated
            assert spent == expected, f"{route}: the view spends {spent!r}, stated {stated!r}"
        assert stated.strip() and (not stated.startswith("none") or len(stated) > 10), route


def test_every_sign_in_path_is_throttled_by_the_login_middleware():
    for route, stated in BUDGETS.items():
        if SIGN_IN in stated:
            assert f"/{route}" in settings.LOGIN_PATHS or route == "admin/", route
    assert "/admin/login/" in settings.LOGIN_PATHS
    assert "/api/v1/auth/token/" in settings.LOGIN_PATHS
    assert "config.middleware.LoginThrottleMiddleware" in settings.MIDDLEWARE


def test_every_websocket_route_has_the_socket_limits():
    routes = {str(p.pattern): p.callback.consumer_class for p in websocket_urlpatterns}
    assert set(routes) == set(WEBSOCKET_BUDGETS), "state the budget of every socket route"
    for route, consumer in routes.items():
        assert issubclass(consumer, TrackingSocket), route
        # The limits live in TrackingSocket's connect (through its admit) and receive; a
        # consumer that replaced either would bypass them.
        assert consumer.connect is TrackingSocket.connect, route
        assert consumer.websocket_receive is TrackingSocket.websocket_receive, route
        # Who is counted: the signed-in user, or for a shared link its client address and link.
        admit = ShareSocket.admit if WEBSOCKET_BUDGETS[route] == SHARE_SOCKET_BUDGET else None
        assert consumer.admit is (admit or TrackingSocket.admit), route

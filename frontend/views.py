"""Server-rendered page shells. Each page is a template plus one ES module that loads
its data from the REST API (session + CSRF) and follows changes over the WebSocket.

The views only decide who may see a page and hand the module its configuration
(``page_config``, rendered with ``json_script``: data, not code, so the pages
need no inline script).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, ensure_csrf_cookie
from django.views.decorators.http import require_safe

from contract.events import LIFECYCLE
from runtime.conf import env_str
from tracker.accounts.rates import parse_rate
from tracker.accounts.security import client_ip, spend
from tracker.notifications import moments
from tracker.notifications import selectors as notifications
from tracker.orders import policy
from tracker.orders.services import MAX_GPS_CLOCK_SKEW_MS, MAX_POINTS_PER_REQUEST
from tracker.sharing import selectors as sharing
from tracker.sharing import tokens

#: Optional internet tiles for production (e.g. https://tile.example/{z}/{x}/{y}.png).
#: Empty (the default): the offline schematic base layer only.
MAP_TILE_ENV = "MAP_TILE_URL"
MAP_TILE_ATTRIBUTION_ENV = "MAP_TILE_ATTRIBUTION"


#: ISO 4217 code the prices are shown in (the API's money is a plain decimal string).
CURRENCY_ENV = "ORDERTRACK_CURRENCY"


def map_config() -> dict[str, str]:
    """Base-map settings the map module reads: internet tiles are opt-in."""
    return {
        "tileUrl": env_str(MAP_TILE_ENV, ""),
        "tileAttribution": env_str(MAP_TILE_ATTRIBUTION_ENV, ""),
        "schematicUrl": static("frontend/geo/bengaluru-schematic.geojson"),
    }


def page_config(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    """What every page module gets: API roots, the user's roles, the map settings, and the
    order lifecycle from the event contract (so the pages keep no copy of it)."""
    user = request.user
    return {
        "apiRoot": "/api/v1/",
        "wsRoot": "/ws/",
        "currency": env_str(CURRENCY_ENV, "USD"),
        "user": {
            "username": user.get_username(),
            "roles": policy.roles_of(user),
            "isOperator": policy.is_operator(user),
        },
        "map": map_config(),
        "lifecycle": [status.value for status in LIFECYCLE],
        "notifications": {**moments.page_rule(), "chosen": notifications.chosen_moments(user)},
        "urls": {
            "order": reverse("frontend:order", args=[0]).replace("/0/", "/{id}/"),
            "myOrders": reverse("frontend:my-orders"),
            "placeOrder": reverse("frontend:place-order"),
            "addresses": reverse("frontend:addresses"),
            "notificationSettings": reverse("frontend:notification-settings"),
            "serviceWorker": reverse("service-worker"),
            "restaurantDashboard": reverse("frontend:restaurant-dashboard"),
            "kitchenBoard": reverse("frontend:kitchen-board"),
            "courier": reverse("frontend:courier"),
            "login": reverse("frontend:login"),
        },
        **extra,
    }


def share_rules() -> dict[str, float]:
    """How long a shared tracking link works, as the pages explain it."""
    return {
        "graceMinutes": round(settings.SHARE_LINK_GRACE.total_seconds() / 60),
        "maxAgeHours": round(settings.SHARE_LINK_MAX_AGE.total_seconds() / 3600, 1),
    }


def gps_rules() -> dict[str, float]:
    """What the courier's page batches its GPS points within: the points budget of
    ``POST /orders/{id}/locations/`` (``api.throttles.LocationPointsThrottle``: a bucket of
    ``burst`` points per courier and order, refilled at ``pointsPerSecond``), its request
    rate (the ``locations`` throttle scope), the points one request may carry, and how
    far ahead of the server's clock a point may be stamped."""
    count, period = parse_rate(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["locations"])
    return {
        "pointsPerSecond": settings.LOCATION_POINTS_PER_SECOND,
        "burst": settings.LOCATION_POINTS_BURST,
        "requestsPerMinute": count * 60 / period,
        "batchMax": MAX_POINTS_PER_REQUEST,
        "aheadSeconds": MAX_GPS_CLOCK_SKEW_MS / 1000,
    }


def page_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page needs a signed-in user and sets the CSRF cookie its API calls send back."""
    return ensure_csrf_cookie(login_required(view))


def _page(request: HttpRequest, template: str, nav: str, title: str, **extra: Any) -> HttpResponse:
    """A page: its template, the menu entry it lights up, its title (the window's and,
    on pages with a head, the heading's) and its module's configuration."""
    context = {"config": page_config(request, **extra), "nav": nav, "title": title}
    return render(request, f"frontend/{template}", context)


@page_view
def my_orders(request: HttpRequest) -> HttpResponse:
    """Active orders with their live status on top, past orders below."""
    return _page(request, "my_orders.html", "orders", "My orders")


@page_view
def order_page(request: HttpRequest, order_id: int) -> HttpResponse:
    """One order: items, the status timeline and the live delivery map.

    Who may see it is the API's decision (a 404 there shows "not found" here),
    so this view does not query the order itself.
    """
    return _page(
        request, "order.html", "orders", f"Order #{order_id}", orderId=order_id, share=share_rules()
    )


@page_view
def place_order(request: HttpRequest) -> HttpResponse:
    """Menu by category, cart, saved address, submit (idempotent)."""
    return _page(request, "place_order.html", "new", "Order food")


@page_view
def addresses(request: HttpRequest) -> HttpResponse:
    """My delivery addresses: add, edit, delete, choose the default, with a map pin."""
    if policy.customer_of(request.user) is None:
        raise PermissionDenied("Delivery addresses belong to customer accounts.")
    return _page(request, "addresses.html", "addresses", "Delivery addresses")


def _restaurant_choice(request: HttpRequest) -> dict[str, Any]:
    """The restaurants this user may follow (operators: every one) and the one the page
    shows: ``?restaurant=<id>``, or their only one, as :func:`policy.restaurant_scope`
    decides for the API's reads too (403 for a restaurant not theirs). None, with what
    to ask (``prompt``), when they must choose: staff of several restaurants (the
    policy's ScopeRequired, which the API answers 400), or an operator, who named none."""
    choices = policy.visible_restaurants(request.user).order_by("name", "id")
    options = [{"id": r.pk, "name": r.name} for r in choices.only("id", "name")]
    if not options:
        if not policy.is_operator(request.user):
            raise PermissionDenied("This page is for restaurant staff.")
        raise Http404("No restaurants yet.")
    raw = request.GET.get("restaurant")
    try:
        wanted = None if raw is None else int(raw)
    except ValueError:
        raise Http404("No such restaurant.") from None
    try:
        chosen = policy.restaurant_scope(request.user, wanted)
    except policy.ScopeRequired as exc:
        return {"restaurants": options, "restaurant": None, "prompt": str(exc)}
    if chosen is None:  # an operator: every restaurant, which a page cannot show at once
        return {"restaurants": options, "restaurant": None, "prompt": "Choose a restaurant."}
    try:
        shown = {option["id"]: option for option in options}[chosen]
    except KeyError:  # an operator's id of no restaurant
        raise Http404("No such restaurant.") from None
    return {"restaurants": options, "restaurant": shown}


def _restaurant_page(
    request: HttpRequest, template: str, nav: str, title: Callable[[str], str]
) -> HttpResponse:
    """A page about one restaurant (``title`` of its name), or, when the request names no
    one restaurant, the page that asks which."""
    choice = _restaurant_choice(request)
    if choice["restaurant"] is None:
        return _page(request, "restaurant_choice.html", nav, "Restaurant", **choice)
    return _page(request, template, nav, title(choice["restaurant"]["name"]), **choice)


@page_view
def restaurant_dashboard(request: HttpRequest) -> HttpResponse:
    """The owner's dashboard: how one restaurant is doing (its staff; operators pick any)."""
    return _restaurant_page(
        request, "restaurant_dashboard.html", "restaurant", lambda name: f"{name}: dashboard"
    )


@page_view
def kitchen_board(request: HttpRequest) -> HttpResponse:
    """The kitchen board: one restaurant's active orders by status, live, with actions."""
    return _restaurant_page(
        request, "kitchen_board.html", "board", lambda name: f"Kitchen · {name}"
    )


@page_view
def notification_settings(request: HttpRequest) -> HttpResponse:
    """How the customer hears about their orders: push on this device (subscribe with the
    server's VAPID key, register over REST; or unsubscribe and delete), email, which
    moments. Customers only (others get a 403 page), as the API's preferences are."""
    if policy.customer_of(request.user) is None:
        raise PermissionDenied("Notification settings belong to customer accounts.")
    return _page(request, "notification_settings.html", "notifications", "Notifications")


#: The service worker's source: a static file, served from the site's root (below).
SERVICE_WORKER = Path(__file__).resolve().parent / "static" / "frontend" / "js" / "sw.js"


@cache
def _service_worker_source() -> bytes:
    return SERVICE_WORKER.read_bytes()


@csrf_exempt  # it changes nothing: any other method gets require_safe's 405
@require_safe
def service_worker(request: HttpRequest) -> HttpResponse:
    """``/sw.js``: the service worker, at the root so that its scope is every page (a
    worker controls only the paths under its script's; from ``/static/`` it would need a
    ``Service-Worker-Allowed`` header). Public, as every static file: it holds nothing of
    anyone. Revalidated on every update check, so a new release reaches the browsers."""
    response = HttpResponse(_service_worker_source(), content_type="text/javascript")
    response["Cache-Control"] = "no-cache"
    return response


@page_view
def operations(request: HttpRequest) -> HttpResponse:
    """The operator dashboard: staff users only (others get a 403 page)."""
    if not policy.is_operator(request.user):
        raise PermissionDenied("The operations dashboard is for operators.")
    return _page(request, "operations.html", "operations", "Operations")


@page_view
def courier(request: HttpRequest) -> HttpResponse:
    """The courier's page, for a phone: the deliveries they carry now, live over
    ``/ws/courier/``, with the steps they may make and their GPS reported from the phone
    while a delivery is on the road. Couriers only (others get a 403 page)."""
    if policy.courier_of(request.user) is None:
        raise PermissionDenied("This page is for couriers.")
    return _page(request, "courier.html", "courier", "My deliveries", gps=gps_rules())


def private_link(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Every answer to a URL that holds a token carries ``tokens.PRIVATE_HEADERS`` (no
    ``Referer`` with the token, no cache, no index), whatever the answer: the view answers
    its errors itself rather than raising them to handlers that would not add them."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        for name, value in tokens.PRIVATE_HEADERS.items():
            response[name] = value
        return response

    return wrapped


@private_link
@csrf_exempt  # it changes nothing: any other method gets require_safe's 405, with the headers
@require_safe
def share_page(request: HttpRequest, token: str) -> HttpResponse:
    """A shared tracking link (``/t/<token>/``): the order's progress, live, for whoever
    has the link, signed in or not.

    Page views are counted per client address (``SHARE_VIEW_RATE``) before the token is
    looked up. An unknown, malformed, revoked or ended link gets the same 404 page. The
    page's data comes only from the link's socket (``/ws/share/<token>/``), built from the
    share allow-list; the page itself holds nothing of the order, nor the token (the
    module reads it from the address)."""
    gone = {"grace_minutes": share_rules()["graceMinutes"]}
    wait = spend("share-view", client_ip(request.META), parse_rate(settings.SHARE_VIEW_RATE))
    if wait is not None:
        context = {**gone, "throttled": True, "title": "Too many requests"}
        response = render(request, "frontend/share_gone.html", context, status=429)
        response["Retry-After"] = str(wait)
        return response
    token = token[:-1] if token.endswith("/") else token
    if sharing.holder_for(token) is None:
        context = {**gone, "title": "Tracking link not valid"}
        return render(request, "frontend/share_gone.html", context, status=404)
    config = {
        "wsRoot": "/ws/",
        "currency": env_str(CURRENCY_ENV, "USD"),
        "user": {"roles": []},
        "map": map_config(),
        "lifecycle": [status.value for status in LIFECYCLE],
        "urls": {},
        "share": share_rules(),
    }
    return render(request, "frontend/share.html", {"config": config, "title": "Delivery tracking"})


class SignInView(auth_views.LoginView):
    """Django session sign-in; the API then accepts the session (with CSRF)."""

    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def get_default_redirect_url(self) -> str:
        """Without ``?next=``: operators land on the operations dashboard, restaurant staff
        on their restaurant's, couriers on their deliveries, everyone else on their orders."""
        user = self.request.user
        if policy.customer_of(user) is None:
            if policy.is_operator(user):
                return reverse("frontend:operations")
            if policy.staff_restaurant_ids(user):
                return reverse("frontend:restaurant-dashboard")
            if policy.courier_of(user) is not None:
                return reverse("frontend:courier")
        return reverse("frontend:my-orders")


class SignOutView(auth_views.LogoutView):
    """Sign out (POST only, CSRF-protected) and land on the sign-in page."""

    next_page = "frontend:login"

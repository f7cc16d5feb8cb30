"""axe-core on every page the frontend serves (issue 56, item 3), on a phone and a desktop.

The pages are enumerated from frontend/urls.py, not listed by hand: each URL pattern must
have its visits in :data:`VISITS` (who signs in, the address to open, the answer expected,
what shows once the page has its data), and a pattern without them fails here before any
browser starts, so a new page cannot skip the check. Each visit runs axe's rules as
tests.fixtures_browser.axe_violations does (every rule axe runs by default: WCAG 2.0, 2.1
A and AA and its best practices; none disabled, nothing excluded), every visible control
must have a name, and the page must not scroll sideways.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from playwright.async_api import expect

from contract.events import now_ms
from frontend import urls
from tests.factories import World, amake_world
from tests.fixtures_browser import CSP_VIOLATIONS, axe_violations, sign_in, unnamed_controls
from tests.fixtures_pinot import item_event, order_event_of
from tests.waiting import wait_until_async

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
COURIER_AT = {"latitude": 12.9735, "longitude": 77.62, "accuracy": 8}


@dataclass(frozen=True)
class Visit:
    """One page to check: opened by ``who`` (password ``pw-<who>``; None: nobody signed
    in) at ``path(world)``; ``status`` its answer; ``ready`` a selector that shows once the
    page has drawn its data; ``sign_out``: the page is where the Sign out button lands."""

    who: str | None
    path: Callable[[World], str]
    status: int = 200
    ready: str | None = None
    sign_out: bool = False


#: Alice's active order; a second one on the road with the courier "rider", shared; the
#: cook of its restaurant; an operator.
WORLD = {
    "restaurant": "Indiranagar Pizza Co.",
    "orders": ("PLACED_ORDER", "OUT_FOR_DELIVERY"),
    "couriers": ("rider",),
    "cooks": True,
    "operator": True,
    "shared": 1,
}

#: Every URL pattern of frontend/urls.py (by its route, as ``str(pattern.pattern)``
#: writes it) and the visits that check what it serves: its page, and its refusals where
#: they are pages of their own.
VISITS: dict[str, list[Visit]] = {
    "": [Visit("alice", lambda w: "/", ready="#active-orders .order-card")],
    "orders/<int:order_id>/": [
        Visit("alice", lambda w: f"/orders/{w.order.pk}/", ready=".timeline .step"),
        Visit("alice", lambda w: "/orders/999999999/", ready=".state-error"),
    ],
    "order/new/": [Visit("alice", lambda w: "/order/new/", ready=".product")],
    "addresses/": [
        Visit("alice", lambda w: "/addresses/", ready=".address-item"),
        Visit("rider", lambda w: "/addresses/", status=403),
    ],
    "settings/notifications/": [
        Visit("alice", lambda w: "/settings/notifications/", ready="#moment-list input"),
        Visit("rider", lambda w: "/settings/notifications/", status=403),
    ],
    "restaurant/": [Visit("cook", lambda w: "/restaurant/", ready="#kpis .kpi-value")],
    "restaurant/board/": [Visit("cook", lambda w: "/restaurant/board/", ready=".ticket")],
    "operations/": [
        Visit("ops", lambda w: "/operations/", ready="#kpi-active .kpi-value"),
        Visit("alice", lambda w: "/operations/", status=403),
    ],
    "courier/": [
        Visit("rider", lambda w: "/courier/", ready=".delivery-card .leaflet-container"),
        Visit("alice", lambda w: "/courier/", status=403),
    ],
    "accounts/login/": [Visit(None, lambda w: "/accounts/login/")],
    "accounts/logout/": [Visit("alice", lambda w: "/", sign_out=True)],
    "t/<str:token>/": [
        Visit(None, lambda w: f"/t/{w.share_token}/", ready=".timeline .step"),
        Visit(None, lambda w: "/t/" + "x" * 43 + "/", status=404),
    ],
    "^t/(?P<token>.+)$": [Visit(None, lambda w: f"/t/{w.share_token}", ready=".timeline .step")],
}


def _routes() -> list[str]:
    return [str(pattern.pattern) for pattern in urls.urlpatterns]


def test_every_page_of_the_frontend_has_its_axe_visits():
    """Runs without a browser: a new URL pattern fails here until VISITS covers it."""
    routes = _routes()
    assert len(routes) == len(set(routes))
    missing = [route for route in routes if not VISITS.get(route)]
    assert missing == [], f"add the visits of these routes to VISITS: {missing}"
    assert set(VISITS) - set(routes) == set(), "VISITS names routes frontend/urls.py lost"


async def _published(pinot, world: World) -> None:
    t0 = now_ms() - 600_000
    riding = world.orders[1]
    await pinot.apublish(
        order_event_of(world.order, 1, created_at=t0),
        order_event_of(
            riding, 2, "OUT_FOR_DELIVERY", created_at=t0, status_time=now_ms() - 120_000,
            courier=(riding.courier_id, 12.9725, 77.63, now_ms() - 5_000), distance_left_km=2.4,
        ),
        item_event(world.order.pk, 1, "Margherita", 2, 8.5, restaurant_id=riding.restaurant_id),
    )  # fmt: skip


async def _check(page, visit: Visit, world: World) -> list[str]:
    """Open the visit's page and return what is wrong with it (nothing: [])."""
    path = visit.path(world)
    problems = []
    if visit.sign_out:
        await page.goto(path)
        await page.get_by_role("button", name="Sign out").click()
        await page.wait_for_url("**/accounts/login/")
    else:
        response = await page.goto(path)
        if response.status != visit.status:
            return [f"answered {response.status}, not {visit.status}"]
    await page.wait_for_load_state("networkidle")
    await expect(page.locator(".state-loading")).to_have_count(0)
    if visit.ready:
        await expect(page.locator(visit.ready).first).to_be_visible(timeout=15_000)
    overflow = await page.evaluate("() => document.documentElement.scrollWidth - innerWidth")
    if overflow > 0:
        problems.append(f"scrolls sideways by {overflow}px")
    violations = await axe_violations(page)
    if violations:
        problems.append(f"axe: {violations}")
    unnamed = await unnamed_controls(page)
    if unnamed:
        problems.append(f"controls without a name: {unnamed}")
    return problems


@pytest.mark.browser
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_every_page_passes_axe_on_a_phone_and_a_desktop(
    browser, asgi_server, pinot, asgi_lifespan
):
    world = await amake_world(**WORLD)
    await _published(pinot, world)
    by_user: dict[str | None, list[tuple[str, Visit]]] = {}
    for route in _routes():  # the URL patterns decide what is checked
        for visit in VISITS[route]:
            by_user.setdefault(visit.who, []).append((route, visit))
    problems: dict[str, list[str]] = {}
    checked = 0
    for viewport, label in [(PHONE, "phone"), (DESKTOP, "desktop")]:
        for who, visits in by_user.items():
            context = await browser.new_context(
                base_url=asgi_server.url, viewport=viewport, locale="en-GB",
                is_mobile=label == "phone", has_touch=label == "phone",
                permissions=["geolocation"], geolocation=COURIER_AT,
            )  # fmt: skip
            context.set_default_timeout(10_000)
            try:
                page = await context.new_page()
                if who is not None:
                    await sign_in(page, who, f"pw-{who}", "/")
                for route, visit in sorted(visits, key=lambda rv: rv[1].sign_out):
                    found = await _check(page, visit, world)
                    checked += 1
                    if found:
                        problems[
                            f"{route} ({who or 'anonymous'}, {visit.path(world)}) @{label}"
                        ] = found
            finally:
                await context.close()
    assert checked == 2 * sum(len(v) for v in VISITS.values())
    assert problems == {}


@pytest.mark.browser
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_script_the_policy_refuses_is_reported_and_does_not_run(page):
    """The check every browser test ends with (tests/fixtures_browser.py) sees a violation:
    an inline script, which the policy refuses, is reported and never runs."""
    await page.goto("/accounts/login/")
    await page.evaluate(
        "() => document.head.append(Object.assign(document.createElement('script'),"
        " {textContent: 'window.ranInline = true'}))"
    )

    async def reported() -> bool:
        return bool(CSP_VIOLATIONS)

    await wait_until_async(reported, 5, "the violation's report", interval=0.05)
    assert "script-src" in CSP_VIOLATIONS[0]
    assert await page.evaluate("() => window.ranInline") is None
    CSP_VIOLATIONS.clear()  # expected here: the test passes

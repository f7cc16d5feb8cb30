"""The courier's page (issue 56, item 1) on a phone, in Debian's Chromium against the real
ASGI server, with Playwright's geolocation emulation standing in for the phone's GPS.

A courier grants location, rides along a route, loses the connection and gets it back;
the positions reach the server in batches within the points budget (never a 429), the
offline ones when the connection returns, and the customer's order page shows the courier
moving (the points go through the real service and broker to the embedded push bridge, on
the fast path: no stream job runs). The order advances from the courier's page, and a
keyboard alone can do it. Without a location (refused, or an insecure address) the page
says why and the steps still work. axe-core for the page is in tests/system/frontend/test_frontend_pages.py
with every other page.
"""

from __future__ import annotations

import contextlib
import re

import pytest
from channels.db import database_sync_to_async
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from playwright.async_api import expect

from contract.events import now_ms
from tests.factories import amake_world
from tests.fixtures_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    axe_violations,
    order_status_becomes,
    screenshot,
    sign_in,
)
from tests.fixtures_pinot import order_event_of
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.outbox.relay import Relay

pytestmark = [pytest.mark.browser, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
RESTAURANT = (12.9719, 77.6412)  # tests.factories.make_restaurant
HOME = (12.975, 77.605)  # alice's saved address
#: From the restaurant towards the door, in ten steps of about 400 m.
ROUTE = [
    (RESTAURANT[0] + (HOME[0] - RESTAURANT[0]) * f / 10, RESTAURANT[1] + (HOME[1] - RESTAURANT[1]) * f / 10)
    for f in range(1, 10)
]  # fmt: skip
CLOCK_SECONDS = r"\d\d?:\d\d:\d\d(?: ?[AP]M)?"
FIX_EVERY_MS = 1200  # a little over the page's one point a second

#: Alice's order, on the road with the courier "rider" (who has no customer account).
WORLD = {
    "restaurant": "Indiranagar Pizza Co.",
    "orders": ("OUT_FOR_DELIVERY",),
    "couriers": ("rider",),
}


def _record(order: Order, version: int, status: str = "OUT_FOR_DELIVERY"):
    """The stream job's record of the order: picked up a minute ago at the restaurant."""
    t0 = now_ms() - 180_000
    times = {"ORDER_CONFIRMED": t0 + 10_000, "BEING_PREPARED": t0 + 20_000,
             "BEING_COOKED": t0 + 30_000, "OUT_FOR_DELIVERY": now_ms() - 60_000}  # fmt: skip
    return order_event_of(
        order, version, status, created_at=t0, status_time=now_ms() - 30_000,
        status_times=times, courier=(order.courier_id, *RESTAURANT, now_ms() - 60_000),
        distance_left_km=3.9,
    )  # fmt: skip


@database_sync_to_async
def _relay() -> None:
    """The outbox relay's run (no relay process runs in the browser tests)."""
    relay = Relay()
    while relay.publish_batch():
        pass


async def _phone(browser, base_url: str, *, located: bool = True):
    """A phone's browser: touch, a phone's screen, and (``located``) location allowed and
    the emulated GPS at the restaurant."""
    options = {"latitude": RESTAURANT[0], "longitude": RESTAURANT[1], "accuracy": 8}
    context = await browser.new_context(
        base_url=base_url, viewport=PHONE, is_mobile=True, has_touch=True,
        device_scale_factor=2, locale="en-GB",
        **({"permissions": ["geolocation"], "geolocation": options} if located else {}),
    )  # fmt: skip
    context.set_default_timeout(10_000)
    page = await context.new_page()
    page.js_errors = []
    page.on("pageerror", lambda exc: page.js_errors.append(str(exc)))
    return context, page


def _location_posts(page) -> list[tuple[int, list[dict]]]:
    """Every answer to the page's location requests: (status, the points it sent)."""
    posts: list[tuple[int, list[dict]]] = []

    def seen(response) -> None:
        if re.search(r"/api/v1/orders/\d+/locations/$", response.url):
            posts.append((response.status, response.request.post_data_json["points"]))

    page.on("response", seen)
    return posts


async def _sign_in_as_rider(page) -> None:
    """Through the form, without ?next=: a courier lands on their deliveries."""
    await page.goto("/accounts/login/")
    await page.get_by_label("Username").fill("rider")
    await page.get_by_label("Password").fill("pw-rider")
    await page.get_by_role("button", name="Sign in").tap()
    await page.wait_for_url("**/courier/")


async def _ride(context, page, points) -> None:
    for lat, lon in points:
        await context.set_geolocation({"latitude": lat, "longitude": lon, "accuracy": 8})
        await page.wait_for_timeout(FIX_EVERY_MS)


async def _moved(page, before: str, timeout: float = 15_000) -> str:
    """The customer's courier marker has left where it was drawn."""
    await page.wait_for_function(
        "([sel, before]) => document.querySelector(sel).style.transform !== before",
        arg=[".pin-courier", before],
        timeout=timeout,
    )
    return await page.locator(".pin-courier").evaluate("el => el.style.transform")


async def test_a_courier_rides_goes_offline_and_back_and_delivers_while_the_customer_watches(
    browser, asgi_server, page, pinot, asgi_lifespan
):
    order = (await amake_world(**WORLD)).order
    await pinot.apublish(_record(order, 1))
    # The customer follows the order on a desktop.
    await page.emulate_media(reduced_motion="reduce")  # a move lands at once: no glide
    await sign_in(page, "alice", "pw-alice", f"/orders/{order.pk}/")
    await expect(page.locator("#live-pill")).to_have_text("Live")
    await expect(page.locator(".pin-courier")).to_have_count(1)
    drawn = await page.locator(".pin-courier").evaluate("el => el.style.transform")

    context, phone = await _phone(browser, asgi_server.url)
    posts = _location_posts(phone)
    try:
        await _sign_in_as_rider(phone)
        card = phone.locator(f'[data-order-id="{order.pk}"]')
        await expect(card).to_contain_text("Indiranagar Pizza Co.")
        await expect(card).to_contain_text(order.delivery_address)
        await expect(card.locator(".order-status")).to_have_text("Out for delivery")
        await expect(phone.locator("#live-pill")).to_have_text("Live")
        # Location was allowed: reporting starts by itself, with the screen kept on (or,
        # where the browser cannot, the page says a locked phone stops reporting).
        state = phone.locator("#gps-state")
        await expect(state).to_have_text("Sharing your location while you deliver.")
        await expect(phone.locator("#announcer")).to_contain_text("Sharing your location")
        await expect(phone.locator("#gps-screen")).to_contain_text(
            re.compile(r"Locking the phone or leaving this page stops|A locked phone stops")
        )
        await expect(card.locator(".pin-courier")).to_have_count(1)  # where the phone is

        # Along the route: batches every few seconds, every one taken.
        await _ride(context, phone, ROUTE[:4])
        await expect(phone.locator("#gps-queued")).to_have_text("None", timeout=12_000)
        await expect(phone.locator("#gps-sent")).to_have_text(re.compile(CLOCK_SECONDS))
        assert posts and {status for status, _ in posts} == {202}
        sent = [point for _, points in posts for point in points]
        assert all(set(p) == {"lat", "lon", "recorded_at"} for p in sent)
        times = [p["recorded_at"] for p in sent]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert any(abs(p["lat"] - ROUTE[3][0]) < 1e-6 for p in sent)
        # The map's text equivalent: distance left, arrival window, last fix.
        left = card.locator(f"#delivery-{order.pk}-left")
        await expect(left).to_have_text(re.compile(r"^\d+(\.\d)? k?m in a straight line$"))
        await expect(card.locator(f"#delivery-{order.pk}-fix")).to_have_text(
            re.compile(CLOCK_SECONDS)
        )
        await expect(card.locator(f"#delivery-{order.pk}-eta")).to_contain_text("arrives around")
        described = await card.locator(".map-courier").get_attribute("aria-describedby")
        assert described == f"delivery-{order.pk}-stats delivery-{order.pk}-note"
        await expect(card.locator(f"#delivery-{order.pk}-note")).to_contain_text(
            "from the drop-off"
        )
        # The customer sees the courier move (the fast path of the points the phone sent).
        drawn = await _moved(page, drawn)
        await screenshot(phone, "courier-phone")

        # Offline: the positions are kept, and go when the connection returns.
        await context.set_offline(True)
        queued = phone.locator("#gps-queued")
        await expect(queued).to_contain_text("(offline)")
        before = len(posts)
        await _ride(context, phone, ROUTE[4:7])
        await expect(queued).to_have_text(re.compile(r"^([3-9]|\d\d+) positions \(offline\)$"))
        assert len(posts) == before  # nothing was tried into the void
        await context.set_offline(False)
        await expect(queued).to_have_text("None", timeout=15_000)
        after = posts[before:]
        assert after and {status for status, _ in after} == {202}
        resent = [point for _, points in after for point in points]
        for lat, _lon in ROUTE[4:7]:
            assert any(abs(p["lat"] - lat) < 1e-6 for p in resent), lat
        await _moved(page, drawn)  # the customer sees where the courier is now

        # One tap: at the door; the customer's page follows.
        await phone.get_by_role("button", name="I'm at the door").tap()
        await expect(card.locator(".order-status")).to_have_text("At the door")
        await expect(phone.locator("#announcer")).to_contain_text(
            f"Order #{order.pk} marked as arriving at the door"
        )
        await order_status_becomes(order.pk, "ARRIVING_AT_DOOR")
        await _relay()
        current = page.locator('.step[aria-current="step"]')
        await expect(current).to_contain_text("Arriving at your door")

        # Delivered: the last positions go first, then reporting stops.
        await _ride(context, phone, ROUTE[7:9])
        await phone.get_by_role("button", name="Delivered").tap()
        await expect(card).to_contain_text("Delivered. Thank you!")
        await order_status_becomes(order.pk, "DELIVERED")
        assert any(abs(p["lat"] - ROUTE[8][0]) < 1e-6 for _, points in posts for p in points)
        await expect(state).to_have_text("No delivery is on the road: your location is not shared.")
        await expect(phone.locator("#gps-screen")).to_be_hidden()
        await _relay()
        await expect(current).to_contain_text("Delivered")

        assert 429 not in {status for status, _ in posts}  # never sent beyond the budget
        assert phone.js_errors == [] and page.js_errors == []
    finally:
        await context.close()


async def test_a_refused_step_shows_the_apis_reason_and_the_button_stays(
    browser, asgi_server, pinot, asgi_lifespan
):
    order = (await amake_world(**WORLD)).order
    await pinot.apublish(_record(order, 1))
    context, phone = await _phone(browser, asgi_server.url)
    try:
        await _sign_in_as_rider(phone)
        button = phone.get_by_role("button", name="I'm at the door")
        await expect(button).to_be_visible()
        # Meanwhile an operator moved the order on: the API refuses the same step (409).
        await database_sync_to_async(services.advance_order)(
            order.pk, by=SYSTEM, to="ARRIVING_AT_DOOR"
        )
        await button.tap()
        alert = phone.locator(f'[data-order-id="{order.pk}"] [role="alert"]')
        await expect(alert).to_contain_text(
            f"could not be marked as arriving at the door: order {order.pk} cannot go from "
            "ARRIVING_AT_DOOR to ARRIVING_AT_DOOR"
        )
        await expect(button).to_have_attribute("aria-disabled", "false")
        assert phone.js_errors == []
    finally:
        await context.close()


async def _tab_to(page, selector: str, limit: int = 40) -> None:
    """Press Tab until ``selector`` has the focus (a keyboard user's way there; none when
    it has it already, as an autofocused field)."""
    for _ in range(limit):
        if await page.evaluate("(s) => !!document.activeElement?.matches(s)", selector):
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"{selector} not reached in {limit} presses of Tab")


async def test_by_keyboard_alone_a_courier_signs_in_and_marks_the_delivery_delivered(
    browser, asgi_server, pinot, asgi_lifespan
):
    order = (await amake_world(**{**WORLD, "orders": ("ARRIVING_AT_DOOR",)})).order
    await pinot.apublish(_record(order, 1, "ARRIVING_AT_DOOR"))
    context, phone = await _phone(browser, asgi_server.url)
    try:
        await phone.goto("/accounts/login/")
        await _tab_to(phone, "input[name=username]")
        await phone.keyboard.type("rider")
        await phone.keyboard.press("Tab")
        await phone.keyboard.type("pw-rider")
        await phone.keyboard.press("Enter")
        await phone.wait_for_url("**/courier/")
        card = phone.locator(f'[data-order-id="{order.pk}"]')
        await expect(card.locator(".order-status")).to_have_text("At the door")
        # The skip link first, into the content; then on to the step.
        await phone.keyboard.press("Tab")
        await expect(phone.locator(".skip-link")).to_be_focused()
        await phone.keyboard.press("Enter")
        await expect(phone.locator("#main")).to_be_focused()
        await _tab_to(phone, f'[data-order-id="{order.pk}"] button[data-step="DELIVERED"]')
        await phone.keyboard.press("Enter")
        await order_status_becomes(order.pk, "DELIVERED")
        await expect(card).to_contain_text("Delivered. Thank you!")
        await expect(phone.locator("#announcer")).to_contain_text(f"Order #{order.pk} delivered.")
        # The keyboard's place is kept: on the delivery's heading, not lost to the page.
        await expect(phone.locator(f"#delivery-{order.pk}-title")).to_be_focused()
        assert phone.js_errors == []
    finally:
        await context.close()


async def test_a_courier_who_has_not_allowed_location_is_asked_and_told_when_it_is_blocked(
    browser, asgi_server, pinot, asgi_lifespan
):
    """No permission given: the page asks with a button (never on load); the headless
    browser, which has nobody to answer the prompt, refuses, and the page says how to
    allow it. The steps work all along."""
    order = (await amake_world(**WORLD)).order
    await pinot.apublish(_record(order, 1))
    context, phone = await _phone(browser, asgi_server.url, located=False)
    try:
        await _sign_in_as_rider(phone)
        state = phone.locator("#gps-state")
        await expect(state).to_have_attribute("data-state", "ask")
        await expect(state).to_contain_text("Share your location to start.")
        share = phone.get_by_role("button", name="Share my location")
        await share.tap()
        await expect(state).to_have_attribute("data-state", "denied")
        await expect(state).to_contain_text("Location is blocked for this page")
        await expect(phone.get_by_role("button", name="Try again")).to_be_visible()
        # Allowed afterwards (in the site settings): reporting starts by itself when the
        # browser tells the page, else with "Try again".
        await context.set_geolocation({"latitude": ROUTE[0][0], "longitude": ROUTE[0][1]})
        await context.grant_permissions(["geolocation"])
        again = phone.get_by_role("button", name="Try again")
        with contextlib.suppress(PlaywrightTimeoutError):
            await again.tap(timeout=1_500)
        await expect(state).to_have_text("Sharing your location while you deliver.")
        await phone.get_by_role("button", name="I'm at the door").tap()
        await order_status_becomes(order.pk, "ARRIVING_AT_DOOR")
        assert phone.js_errors == []
    finally:
        await context.close()


async def test_on_an_insecure_address_the_page_says_why_and_the_steps_still_work(
    browser, asgi_server, pinot, settings, asgi_lifespan
):
    """Browsers give a position only to secure pages (HTTPS, or localhost). Opened at a
    plain-HTTP name (mapped to this server), the page says so, offers no button that cannot
    work, and the courier can still mark the delivery."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "courier.test"]
    order = (await amake_world(**WORLD)).order
    await pinot.apublish(_record(order, 1))
    chromium = await browser.browser_type.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP courier.test 127.0.0.1"],
    )
    try:
        context, phone = await _phone(chromium, f"http://courier.test:{asgi_server.port}")
        await _sign_in_as_rider(phone)
        assert await phone.evaluate("window.isSecureContext") is False
        state = phone.locator("#gps-state")
        await expect(state).to_have_attribute("data-state", "insecure")
        await expect(state).to_contain_text(
            f"browsers give it only to secure pages, and http://courier.test:{asgi_server.port}"
        )
        assert await phone.get_by_role("button", name="Share my location").count() == 0
        await expect(phone.locator("#gps-stats")).to_contain_text("Waiting to send")
        await phone.get_by_role("button", name="I'm at the door").tap()
        await order_status_becomes(order.pk, "ARRIVING_AT_DOOR")
        assert await axe_violations(phone) == []
        assert phone.js_errors == []
    finally:
        await chromium.close()


async def test_the_thinning_and_the_budget_copy_keep_their_rule(
    browser, asgi_server, pinot, asgi_lifespan
):
    """gps.js's rule (docs/api.md, "The courier's page") in the page's own module: an
    offline queue is thinned evenly, oldest and newest kept; after a 429 nothing is sent
    before its Retry-After, and then exactly the refused batch fits; a stale point (older
    than 20 minutes, or than its order) is dropped before sending."""
    order = (await amake_world(**WORLD)).order
    await pinot.apublish(_record(order, 1))
    context, phone = await _phone(browser, asgi_server.url)
    try:
        await _sign_in_as_rider(phone)
        result = await phone.evaluate(
            """async () => {
              const gps = await import("/static/frontend/js/gps.js");
              const thinned = gps.thin([...Array(10).keys()], 4);
              const bucket = new gps.PointsBucket(1200, 2, 0);
              bucket.spend(1150, 0);
              const before = bucket.available(0);
              bucket.refused(400, 150, 0);
              const sent = [];
              const reporter = new gps.Reporter(
                {pointsPerSecond: 2, burst: 1200, requestsPerMinute: 600, batchMax: 500,
                 aheadSeconds: 30},
                {send: async (id, points) => { sent.push(...points); }});
              const now = Date.now();
              reporter.track(1, new Date(now - 60 * 60000).toISOString());
              reporter.add({lat: 1, lon: 1, at: now - 70 * 60000});  // before the order
              reporter.add({lat: 2, lon: 2, at: now - 25 * 60000});  // older than 20 min
              reporter.add({lat: 3, lon: 3, at: now - 5000});
              reporter.add({lat: 4, lon: 4, at: now - 4500});  // same second: replaces
              reporter.add({lat: 5, lon: 5, at: now - 1000});
              await reporter.flush(1);
              return {thinned, before, during: bucket.available(149000),
                      then: bucket.available(150000), sent: sent.map(p => p.lat)};
            }"""
        )
        assert result == {"thinned": [0, 3, 6, 9], "before": 50, "during": 0, "then": 400,
                          "sent": [4, 5]}  # fmt: skip
    finally:
        await context.close()

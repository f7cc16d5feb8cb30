"""Sharing an order's tracking, in Debian's Chromium against the real ASGI server (issue 56).

The customer shares from the order page by keyboard only; someone without an account opens
the link and follows the courier; the customer stops sharing and the shared page says the
link has ended. The shared page passes axe-core on a desktop and a phone, like every page.
"""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from playwright.async_api import expect

from contract.events import now_ms
from tests.factories import make_courier, make_customer, make_restaurant, place
from tests.fixtures_browser import axe_violations, screenshot, sign_in
from tests.fixtures_pinot import order_event_of
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM

pytestmark = [pytest.mark.browser, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
TIME = r"\d\d?:\d\d(?: ?[AP]M)?"


@database_sync_to_async
def _order_on_the_road() -> Order:
    alice = make_customer("alice")
    restaurant = make_restaurant("Indiranagar Pizza Co.")
    courier = make_courier()
    order = place(alice, restaurant)
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=courier)
    return Order.objects.select_related("courier", "restaurant").get(pk=order.pk)


def _on_the_road(order: Order, version: int, lat: float, lon: float, km: float, t0: int):
    return order_event_of(
        order, version, "OUT_FOR_DELIVERY", created_at=t0, status_time=t0 + 30_000,
        status_times={"ORDER_CONFIRMED": t0 + 5_000, "BEING_PREPARED": t0 + 10_000,
                      "BEING_COOKED": t0 + 20_000},
        courier=(order.courier_id, lat, lon, now_ms()), distance_left_km=km,
    )  # fmt: skip


async def _press(page, name: str) -> None:
    """Reach a button with the keyboard (focus, as Tab would) and press Enter: no mouse."""
    button = page.get_by_role("button", name=name)
    await button.focus()
    await expect(button).to_be_focused()
    await page.keyboard.press("Enter")


async def test_a_customer_shares_by_keyboard_and_a_stranger_follows_until_it_is_revoked(
    page, browser, asgi_server, pinot, asgi_lifespan
):
    order = await _order_on_the_road()
    t0 = now_ms() - 120_000
    await pinot.apublish(_on_the_road(order, 1, 12.9719, 77.6412, 4.23, t0))
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await sign_in(page, "alice", "pw-alice", f"/orders/{order.pk}/")
    await expect(page.locator("#live-pill")).to_have_text("Live")

    await _press(page, "Share tracking link")
    await expect(page.get_by_role("button", name="Share tracking link")).to_have_attribute(
        "aria-expanded", "true"
    )
    await expect(page.locator("#share-panel")).to_contain_text("without signing in")
    await expect(page.get_by_role("button", name="Make a link")).to_be_focused()
    await page.keyboard.press("Enter")
    link = page.get_by_label("Tracking link")
    await expect(link).to_be_focused()
    url = await link.input_value()
    assert re.fullmatch(rf"{asgi_server.url}/t/[A-Za-z0-9_-]{{43}}/", url), url
    await expect(page.locator("#announcer")).to_contain_text("Tracking link made")
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Copy link")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#announcer")).to_contain_text(re.compile("copied|Control\\+C"))
    await page.keyboard.press("Escape")  # the panel closes, focus back on its button
    await expect(page.get_by_role("button", name="Share tracking link")).to_be_focused()

    # Someone without an account opens the link.
    stranger = await browser.new_context(base_url=asgi_server.url, locale="en-GB")
    try:
        shared = await stranger.new_page()
        errors: list[str] = []
        shared.on("pageerror", lambda exc: errors.append(str(exc)))
        response = await shared.goto(url)
        assert response.status == 200
        headers = await response.all_headers()
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
        assert headers["x-robots-tag"] == "noindex"
        await expect(shared.locator("#live-pill")).to_have_text("Live")
        await expect(shared.locator('.step[aria-current="step"]')).to_contain_text(
            "Out for delivery"
        )
        await expect(shared.locator(".pin-courier")).to_have_count(1)
        await expect(shared.locator("#distance-left")).to_have_text("4.2 km")
        await expect(shared.locator("#eta .eta-range")).to_have_text(
            re.compile(rf"^arrives around {TIME} \({TIME}–{TIME}\)$")
        )
        await expect(shared.locator("#last-fix")).to_have_text(re.compile(TIME))
        text = await shared.locator("body").inner_text()
        for private in ("alice", order.delivery_address, "Indiranagar Pizza Co.", "18.50",
                        f"#{order.pk}", "rider"):  # fmt: skip
            assert private not in text, private
        assert await shared.locator(".pin-restaurant, .pin-home").count() == 0
        await screenshot(shared, "shared-desktop")
        violations = await axe_violations(shared)
        assert violations == [], violations

        # The courier moves: the marker glides, the text equivalent follows.
        before = await shared.locator(".pin-courier").evaluate("el => el.style.transform")
        await pinot.apublish(_on_the_road(order, 2, 12.9650, 77.6300, 2.61, t0))
        await expect(shared.locator("#distance-left")).to_have_text("2.6 km")
        await shared.wait_for_timeout(1600)
        after = await shared.locator(".pin-courier").evaluate("el => el.style.transform")
        assert before != after

        # The customer stops sharing, by keyboard: the shared page ends within seconds.
        await _press(page, "Share tracking link")
        await expect(page.locator("#share-panel")).to_contain_text("Sharing is on")
        await _press(page, "Stop sharing")
        await expect(page.locator("#announcer")).to_contain_text("Sharing stopped")
        await expect(page.get_by_role("button", name="Make a new link")).to_have_count(0)
        ended = shared.get_by_role("alert")
        await expect(ended).to_contain_text("This tracking link has ended", timeout=3_000)
        assert await shared.locator(".pin-courier").count() == 0
        again = await shared.goto(url)
        assert again.status == 404
        assert errors == []
    finally:
        await stranger.close()
    assert page.js_errors == []


async def test_the_shared_page_passes_axe_on_a_phone_and_works_by_keyboard(
    browser, asgi_server, pinot, asgi_lifespan
):
    from tracker.sharing import services as sharing

    order = await _order_on_the_road()
    await pinot.apublish(_on_the_road(order, 1, 12.9719, 77.6412, 3.0, now_ms() - 120_000))
    _, token = await database_sync_to_async(sharing.create_link)(
        order.pk, by=await database_sync_to_async(lambda: order.customer.user)()
    )
    context = await browser.new_context(base_url=asgi_server.url, viewport=PHONE, is_mobile=True,
                                        has_touch=True, device_scale_factor=2)  # fmt: skip
    try:
        shared = await context.new_page()
        await shared.goto(f"/t/{token}/")
        await expect(shared.locator("#live-pill")).to_have_text("Live")
        await expect(shared.locator(".state-loading")).to_have_count(0)
        overflow = await shared.evaluate(
            "() => document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 0, f"the shared page scrolls sideways by {overflow}px"
        violations = await axe_violations(shared)
        assert violations == [], violations
        await screenshot(shared, "shared-phone")
        # Keyboard: the skip link first, then into the content; the map has a text
        # equivalent (its description names the facts beside it).
        await shared.keyboard.press("Tab")
        await expect(shared.locator(".skip-link")).to_be_focused()
        await shared.keyboard.press("Enter")
        await expect(shared.locator("#main")).to_be_focused()
        described = await shared.locator("#share-map").get_attribute("aria-describedby")
        assert described == "share-stats share-map-note"
        await expect(shared.locator("#share-map-note")).to_contain_text("km from the destination")
    finally:
        await context.close()


async def test_a_link_that_does_not_work_shows_the_same_page_and_passes_axe(page):
    response = await page.goto("/t/" + "x" * 43 + "/")
    assert response.status == 404
    await expect(
        page.get_by_role("heading", name="This tracking link does not work")
    ).to_be_visible()
    assert await axe_violations(page) == []

"""The restaurant's pages and the customer's new ones, in Debian's Chromium against the real server.

Writes go through the pages (REST, services, the outbox); the tracking state the
pages read arrives as enriched records published to the real broker, read by the
local Pinot server and the embedded push bridge, the way the stream job's output
does in production (there is no Spark job in these tests, so each test publishes
the record the job would write after a change).
"""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from playwright.async_api import expect

from contract.events import now_ms
from tests.factories import World, amake_world, place
from tests.fixtures_browser import axe_violations, order_status_becomes, sign_in
from tests.fixtures_pinot import item_event, order_event_of
from tracker.customers.models import Address
from tracker.notifications.moments import Moment
from tracker.notifications.payload import LockScreen
from tracker.orders import services
from tracker.orders.policy import SYSTEM

pytestmark = [pytest.mark.browser, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
SHOTS = "/tmp"

#: Alice's orders at two restaurants, each with its cook ("cook", "curry-cook"); "ops".
WORLD = {
    "restaurant": "Indiranagar Pizza Co.",
    "second_restaurant": "Koramangala Curry",
    "cooks": True,
    "operator": True,
}


async def _published(pinot, world: World) -> tuple[World, int]:
    """``world`` with both orders in Pinot, placed at the time returned."""
    t0 = now_ms() - 90_000
    await pinot.apublish(
        order_event_of(world.order, 1, created_at=t0),
        order_event_of(world.second_order, 1, created_at=t0),
    )
    return world, t0


async def _shot(page, name: str) -> None:
    """A full-page PNG in /tmp for the issue's closing note (from the top: the bar is sticky)."""
    await page.evaluate("window.scrollTo(0, 0)")
    await page.screenshot(path=f"{SHOTS}/ordertrack-{name}.png", full_page=True)


async def test_the_kitchen_runs_an_order_from_the_board_while_the_customer_watches(
    browser, asgi_server, page, pinot, asgi_lifespan
):
    world, t0 = await _published(pinot, await amake_world(**WORLD))
    order = world.order
    await sign_in(page, "cook", "pw-cook", "/restaurant/board/")
    new = page.locator('[data-column="new"]')
    confirmed = page.locator('[data-column="confirmed"]')
    ticket = page.locator(f'.ticket[data-order-id="{order.pk}"]')
    await expect(new.locator(ticket)).to_contain_text("2× Margherita")
    await expect(page.locator("#live-pill")).to_have_text("Live")
    # Another restaurant's order is never on this board.
    await expect(page.locator(f'.ticket[data-order-id="{world.second_order.pk}"]')).to_have_count(0)

    customer = await browser.new_context(base_url=asgi_server.url)
    watcher = await customer.new_page()
    try:
        await sign_in(watcher, "alice", "pw-alice", f"/orders/{order.pk}/")
        await expect(watcher.locator('.step[aria-current="step"]')).to_contain_text("Order placed")
        await expect(watcher).to_have_title(re.compile(r"^Order placed · Order #\d+"))

        # Confirm: the card moves at once, the database follows through the services.
        await ticket.get_by_role("button", name="Confirm").click()
        await expect(confirmed.locator(ticket)).to_be_visible()
        await order_status_becomes(order.pk, "ORDER_CONFIRMED")
        await pinot.apublish(  # what the stream job writes for that change
            order_event_of(order, 2, "ORDER_CONFIRMED", created_at=t0, status_time=now_ms())
        )
        await expect(watcher.locator('.step[aria-current="step"]')).to_contain_text("Confirmed")
        await expect(watcher).to_have_title(re.compile(r"^Confirmed · Order #"))
        await expect(confirmed.locator(ticket)).to_be_visible()

        # Refused (the customer cancelled meanwhile): the card moves back, with the reason.
        await database_sync_to_async(services.cancel_order)(
            order.pk, by=SYSTEM, via="test:customer"
        )
        await ticket.get_by_role("button", name="Start preparing").click()
        await expect(page.locator(".toast-error")).to_contain_text("could not move")
        await expect(confirmed.locator(ticket)).to_be_visible()
        await expect(ticket.get_by_role("button", name="Start preparing")).to_be_enabled()
        await pinot.apublish(
            order_event_of(order, 3, "CANCELLED", created_at=t0, status_time=now_ms())
        )
        await expect(ticket).to_have_count(0)  # finished orders leave the board
        await expect(watcher.locator('.step[aria-current="step"]')).to_contain_text("Cancelled")
    finally:
        await customer.close()

    # A new order arrives: it appears in "New", flagged; the other restaurant's does not.
    fresh = await database_sync_to_async(place)(world.alice, world.restaurant)
    other = await database_sync_to_async(place)(world.alice, world.second)
    await pinot.apublish(order_event_of(other, 1), order_event_of(fresh, 1))
    fresh_ticket = new.locator(f'.ticket[data-order-id="{fresh.pk}"]')
    await expect(fresh_ticket).to_have_class(re.compile(r"ticket-new"))
    await expect(fresh_ticket.locator(".ticket-flag")).to_have_text("New")
    await expect(fresh_ticket).to_contain_text("Margherita")
    await expect(page.locator("#announcer")).to_contain_text(f"New order #{fresh.pk}")
    await expect(page.locator(f'.ticket[data-order-id="{other.pk}"]')).to_have_count(0)
    await _shot(page, "kitchen-board-desktop")

    # Two-step cancel from the board.
    await fresh_ticket.get_by_role("button", name=f"Cancel order {fresh.pk}").click()
    await fresh_ticket.get_by_role("button", name="Confirm cancel").click()
    await order_status_becomes(fresh.pk, "CANCELLED")

    # The page never shows another restaurant's board.
    response = await page.goto(f"/restaurant/board/?restaurant={world.second.pk}")
    assert response.status == 403
    assert page.js_errors == []


async def test_the_owner_sees_how_the_restaurant_is_doing_and_only_their_own(
    page, pinot, asgi_lifespan
):
    world = await amake_world(**WORLD)
    now = now_ms()
    order, curry_order = world.order, world.second_order
    pizza, curry = world.restaurant, world.second
    past = await database_sync_to_async(place)(world.alice, pizza)
    cancelled = await database_sync_to_async(place)(world.alice, pizza)
    await pinot.apublish(
        order_event_of(order, 3, "BEING_COOKED", created_at=now - 20 * 60_000,
                       status_time=now - 5 * 60_000, total=18.5),
        order_event_of(past, 7, "DELIVERED", created_at=now - 90 * 60_000,
                       status_time=now - 50 * 60_000, total=10.0),
        order_event_of(cancelled, 2, "CANCELLED", created_at=now - 10 * 60_000, total=50.0),
        order_event_of(curry_order, 1, created_at=now - 5 * 60_000, total=77.0),
        item_event(order.pk, 1, "Margherita", 2, 8.5, restaurant_id=pizza.pk, at=now - 20 * 60_000),
        item_event(order.pk, 2, "Pepsi", 1, 1.5, restaurant_id=pizza.pk, at=now - 20 * 60_000),
        item_event(past.pk, 1, "Margherita", 1, 8.5, restaurant_id=pizza.pk, at=now - 90 * 60_000),
        item_event(cancelled.pk, 1, "Calzone", 9, 5.0, restaurant_id=pizza.pk, at=now - 600_000),
        item_event(curry_order.pk, 1, "Korma", 5, 9.0, restaurant_id=curry.pk, at=now - 300_000),
    )  # fmt: skip

    # Staff land on their restaurant's dashboard after signing in.
    await page.goto("/accounts/login/")
    await page.get_by_label("Username").fill("cook")
    await page.get_by_label("Password").fill("pw-cook")
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/restaurant/")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Indiranagar Pizza Co.")
    await expect(page.locator("#kpi-orders .kpi-value")).to_have_text("2")  # 24 h, not cancelled
    await expect(page.locator("#kpi-sales .kpi-value")).to_contain_text("28.50")
    await expect(page.locator("#kpi-aov .kpi-value")).to_contain_text("14.25")
    await expect(page.locator("#series-chart svg rect.chart-bar-current")).to_have_count(24)
    dishes = page.locator("#top-dishes li")
    await expect(dishes.first).to_contain_text("Margherita")
    await expect(page.locator("#top-dishes")).not_to_contain_text("Calzone")  # cancelled
    await expect(page.locator("#top-dishes")).not_to_contain_text("Korma")  # not theirs
    await expect(page.locator("#time-in-status")).to_contain_text("In the oven")
    await expect(page.locator("#live-pill")).to_have_text("Live")

    await page.get_by_text("1 hour").click()
    await expect(page.locator("#kpi-orders .kpi-value")).to_have_text("1")
    await expect(page.locator("#kpi-orders .chip")).to_contain_text("±0%")
    await expect(page.locator("#series-chart svg rect.chart-bar-current")).to_have_count(12)
    await page.get_by_text("24 hours").click()
    await expect(page.locator("#kpi-orders .kpi-value")).to_have_text("2")

    # Pushed: a status change of their order refreshes the figures without a reload.
    newest = await database_sync_to_async(place)(world.alice, pizza)
    await pinot.apublish(order_event_of(newest, 1, total=11.5))
    await expect(page.locator("#kpi-orders .kpi-value")).to_have_text("3")
    await _shot(page, "restaurant-dashboard-desktop")

    # Another restaurant's dashboard: not for this cook (page and API alike).
    response = await page.goto(f"/restaurant/?restaurant={curry.pk}")
    assert response.status == 403
    api = await page.request.get(f"/api/v1/operations/sales-series/?restaurant={curry.pk}")
    assert api.status == 403
    assert page.js_errors == []


async def test_operators_pick_any_restaurant_and_customers_have_no_restaurant_pages(
    page, pinot, asgi_lifespan
):
    world, _ = await _published(pinot, await amake_world(**WORLD))
    await sign_in(page, "ops", "pw-ops", "/restaurant/")
    await expect(page.get_by_label("Restaurant")).to_be_visible()
    await page.get_by_label("Restaurant").select_option(str(world.second.pk))
    await page.get_by_role("button", name="Show").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Koramangala Curry")
    await page.goto(f"/restaurant/board/?restaurant={world.second.pk}")
    await expect(page.locator(f'.ticket[data-order-id="{world.second_order.pk}"]')).to_be_visible()
    await expect(page.locator(f'.ticket[data-order-id="{world.order.pk}"]')).to_have_count(0)
    await page.get_by_role("button", name="Sign out").click()
    await sign_in(page, "alice", "pw-alice")
    for path in ("/restaurant/", "/restaurant/board/"):
        assert (await page.goto(path)).status == 403


async def test_a_customer_manages_delivery_addresses_with_a_map_pin(page, pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    await sign_in(page, "alice", "pw-alice", "/addresses/")
    items = page.locator(".address-item")
    await expect(items).to_have_count(1)
    await expect(items.first).to_contain_text("Default")

    # Add one: the pin sets the coordinates; validated by the API (latitude out of range).
    await page.get_by_label("Name").fill("Work")
    await page.get_by_label("Street address").fill("80 MG Road")
    box = await page.locator("#pick-map").bounding_box()
    await page.mouse.click(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.4)
    await expect(page.get_by_label("Latitude")).to_have_value(re.compile(r"^12\.\d+"))
    await expect(page.locator("#pick-map .pin-home")).to_have_count(1)
    lat = await page.get_by_label("Latitude").input_value()
    await page.get_by_label("Latitude").fill("95")
    await page.get_by_role("button", name="Save address").click()
    await expect(page.locator("#err-lat")).to_contain_text("less than or equal to 90")
    await expect(page.get_by_label("Latitude")).to_have_attribute("aria-invalid", "true")
    await page.get_by_label("Latitude").fill(lat)
    await page.get_by_label("Use as my default delivery address").check()
    await page.get_by_role("button", name="Save address").click()
    await expect(items).to_have_count(2)
    work = items.filter(has_text="80 MG Road")
    await expect(work).to_contain_text("Default")
    await _shot(page, "addresses-desktop")

    # Edit it, make the old one the default again, then delete the new one.
    await work.get_by_role("button", name=re.compile("^Edit")).click()
    await page.get_by_label("Street address").fill("81 MG Road")
    await page.get_by_role("button", name="Save changes").click()
    await expect(items.filter(has_text="81 MG Road")).to_have_count(1)
    church = items.filter(has_text="1 Church St")
    await church.get_by_role("button", name=re.compile("default$")).click()
    await expect(church).to_contain_text("Default")
    work = items.filter(has_text="81 MG Road")
    await work.get_by_role("button", name=re.compile("^Delete")).click()
    await work.get_by_role("button", name="Confirm delete").click()
    await expect(items).to_have_count(1)

    rows = await database_sync_to_async(
        lambda: list(
            Address.objects.filter(customer=world.alice).values_list("line1", "is_default")
        )
    )()
    assert rows == [("1 Church St", True)]
    assert page.js_errors == []


async def test_a_status_change_in_a_background_tab_notifies_once_allowed(
    browser, asgi_server, pinot, asgi_lifespan
):
    from channels.db import database_sync_to_async

    from tracker.notifications.models import NotificationPreferences

    world, t0 = await _published(pinot, await amake_world(**WORLD))
    order = world.order
    # She chose not to hear that it left the restaurant (the settings page): nor from the tab.
    chosen = [m.value for m in Moment if m is not Moment.OUT_FOR_DELIVERY]
    await database_sync_to_async(NotificationPreferences.objects.create)(
        customer=world.alice, moments=chosen
    )
    context = await browser.new_context(base_url=asgi_server.url)
    await context.grant_permissions(["notifications"], origin=asgi_server.url)
    # Headless Chromium has no window to put in the background: the page is told it is
    # hidden, and the notifications it shows are recorded on their way to the real API.
    await context.add_init_script(
        """
        window.__shown = [];
        const Real = window.Notification;
        window.Notification = class extends Real {
          constructor(title, options) { window.__shown.push({title, ...options}); super(title, options); }
        };
        Object.defineProperty(document, 'hidden', { get: () => window.__hidden === true });
        """
    )
    try:
        page = await context.new_page()
        await sign_in(page, "alice", "pw-alice", f"/orders/{order.pk}/")
        await expect(page.locator("#notify-state")).to_have_text("Notifications on")
        await expect(page.locator("#live-pill")).to_have_text("Live")
        # Visible: no notification, only the title.
        await pinot.apublish(order_event_of(order, 2, "ORDER_CONFIRMED", created_at=t0))
        await expect(page).to_have_title(re.compile(r"^Confirmed · Order #"))
        assert await page.evaluate("window.__shown.length") == 0
        # In the background: a kitchen step only moves the title, as does a moment she
        # turned off; a moment notifies, with the tag the server's push of that moment
        # carries (one replaces the other).
        await page.evaluate("window.__hidden = true")
        await pinot.apublish(order_event_of(order, 3, "BEING_PREPARED", created_at=t0))
        await expect(page).to_have_title(re.compile(r"^Being prepared · Order #"))
        await pinot.apublish(order_event_of(order, 4, "OUT_FOR_DELIVERY", created_at=t0))
        await expect(page).to_have_title(re.compile(r"^Out for delivery · Order #"))
        await pinot.apublish(order_event_of(order, 5, "CANCELLED", created_at=t0))
        await expect(page).to_have_title(re.compile(r"^Cancelled · Order #"))
        await page.wait_for_function("window.__shown.length > 0")
        shown = await page.evaluate("window.__shown")
        # Worded as the push of that moment (moments.WORDING), which replaces it.
        pushed = LockScreen.of(order.pk, Moment.CANCELLED, "CANCELLED", t0, None)
        assert [(n["title"], n["tag"], n["body"]) for n in shown] == [
            (pushed.title, pushed.tag, pushed.body)
        ]
        assert pushed.title == f"Order #{order.pk} is cancelled"
    finally:
        await context.close()


async def test_new_pages_fit_a_phone_and_have_no_axe_violations(
    browser, asgi_server, pinot, asgi_lifespan
):
    world, _ = await _published(pinot, await amake_world(**WORLD))
    await pinot.apublish(
        item_event(world.order.pk, 1, "Margherita", 2, 8.5, restaurant_id=world.restaurant.pk)
    )
    problems: dict[str, object] = {}
    for who, password, paths in [
        ("cook", "pw-cook", ["/restaurant/", "/restaurant/board/"]),
        ("alice", "pw-alice", ["/addresses/"]),
        ("ops", "pw-ops", ["/operations/"]),
    ]:
        for viewport, label in [(PHONE, "phone"), ({"width": 1280, "height": 900}, "desktop")]:
            context = await browser.new_context(base_url=asgi_server.url, viewport=viewport)
            try:
                page = await context.new_page()
                await sign_in(page, who, password, paths[0])
                for path in paths:
                    await page.goto(path)
                    await page.wait_for_load_state("networkidle")
                    await expect(page.locator(".state-loading")).to_have_count(0)
                    overflow = await page.evaluate(
                        "() => document.documentElement.scrollWidth - window.innerWidth"
                    )
                    if overflow > 0:
                        problems[f"{path} @{label} scrolls sideways"] = overflow
                    cut = await page.evaluate(TABLES_CUT)
                    if cut:
                        problems[f"{path} @{label} tables wider than their cards"] = cut
                    violations = await axe_violations(page)
                    if violations:
                        problems[f"{path} @{label} axe"] = violations
                    if label == "phone" and path != "/operations/":
                        name = path.strip("/").replace("/", "-") or "home"
                        await _shot(page, f"{name}-phone")
            finally:
                await context.close()
    assert problems == {}


#: Table wrappers whose table is wider than the wrapper (a cut or scrolling column).
TABLES_CUT = """() => [...document.querySelectorAll('.table-wrap')]
  .filter(w => w.offsetParent !== null && w.scrollWidth > w.clientWidth + 1)
  .map(w => `${w.id}: ${w.scrollWidth} > ${w.clientWidth}`)"""


async def test_the_operators_page_is_pushed_not_polled(page, pinot, asgi_lifespan):
    world, _ = await _published(pinot, await amake_world(**WORLD))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/api/v1/operations/" in r.url else None)
    await sign_in(page, "ops", "pw-ops", "/operations/")
    # Every restaurant's orders: the run's Pinot holds other tests' too.
    active = page.locator("#kpi-active .kpi-value")
    await expect(active).to_have_text(re.compile(r"^\d+$"))
    await expect(page.locator("#live-pill")).to_have_text("Live")
    await page.wait_for_timeout(11_000)  # the old page polled every 10 s: now nothing changes
    before = len(requests)
    await page.wait_for_timeout(2_000)
    assert len(requests) == before
    # A new order anywhere: the figures follow within seconds, without a reload.
    shown = int(await active.text_content())
    fresh = await database_sync_to_async(place)(world.alice, world.second)
    await pinot.apublish(order_event_of(fresh, 1))
    await expect(active).to_have_text(str(shown + 1), timeout=8_000)
    assert len(requests) > before
    assert page.js_errors == []

"""The browser frontend, driven in Debian's Chromium against the real ASGI server.

Data reaches the pages the production way: orders are written through the
system of record (factories / the UI itself), and tracking state arrives as
enriched records published to the real broker, read by the local Pinot server
(REST) and the embedded push bridge (WebSockets).
"""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from playwright.async_api import expect

from contract.events import now_ms
from tests.factories import World, amake_world, place
from tests.fixtures_browser import screenshot, sign_in
from tests.fixtures_pinot import delivery_event, item_event, order_event_of
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.tracking import read_model

pytestmark = [pytest.mark.browser, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
CENTRE = (12.9716, 77.5946)  # the operations map opens centred here
TIME = r"\d\d?:\d\d(?: ?[AP]M)?"  # a clock time as the browser's locale writes it

#: Alice's order and her past one (both placed here), a courier, the operator "ops".
WORLD = {
    "restaurant": "Indiranagar Pizza Co.",
    "orders": ("PLACED_ORDER", "PLACED_ORDER"),
    "couriers": ("rider",),
    "operator": True,
    "menu_images": True,
}


async def _tracked_world(pinot) -> tuple[World, int]:
    """Alice with one active order (placed a minute ago, at the time returned) and one
    delivered order."""
    world = await amake_world(**WORLD)
    t0 = now_ms() - 60_000
    old = t0 - 3_600_000
    await pinot.apublish(
        order_event_of(world.order, 1, created_at=t0),
        order_event_of(
            world.orders[1], 7, "DELIVERED", created_at=old, status_time=old + 1_800_000,
            status_times={"ORDER_CONFIRMED": old + 60_000, "OUT_FOR_DELIVERY": old + 900_000},
        ),
    )  # fmt: skip
    return world, t0


async def test_sign_in_my_orders_update_live_and_sign_out(page, pinot, asgi_lifespan):
    world, t0 = await _tracked_world(pinot)
    order = world.order
    await page.goto("/")
    await expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    await page.get_by_label("Username").fill("alice")
    await page.get_by_label("Password").fill("wrong")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    await sign_in(page, "alice", "pw-alice")

    active = page.locator("#active-orders")
    card = active.locator(f'[data-order-id="{order.pk}"]')
    await expect(card).to_contain_text("Order placed")
    await expect(card).to_contain_text("2× Margherita")
    arrives = re.compile(rf"Arrives around {TIME} \({TIME}–{TIME}\)")
    await expect(card.locator(".fact-eta")).to_have_text(arrives)
    await expect(page.locator("#past-orders")).to_contain_text("Delivered")
    await expect(page.locator("#live-pill")).to_have_text("Live")

    await pinot.apublish(
        order_event_of(order, 2, "ORDER_CONFIRMED", created_at=t0, status_time=now_ms()),
    )
    await expect(card).to_contain_text("Confirmed")  # no reload
    await expect(card.locator(".fact-eta")).to_have_text(arrives)  # a step fewer ahead
    await expect(page.locator("#announcer")).to_contain_text(f"Order #{order.pk}")

    # Finishing moves the card from the active list to the past list.
    await pinot.apublish(
        order_event_of(order, 3, "DELIVERED", created_at=t0, status_time=now_ms()),
    )
    await expect(page.locator(f'#past-orders [data-order-id="{order.pk}"]')).to_contain_text(
        "Delivered"
    )
    await expect(active).to_contain_text("No active orders")
    assert page.js_errors == []

    await page.get_by_role("button", name="Sign out").click()
    await expect(page).to_have_url(re.compile(r"/accounts/login/"))
    await page.goto("/")
    await expect(page).to_have_url(re.compile(r"/accounts/login/"))


async def test_order_page_timeline_and_courier_move_live_then_resume_after_a_drop(
    page, pinot, asgi_lifespan
):
    world, t0 = await _tracked_world(pinot)
    order = world.order
    sockets = []

    async def proxy(ws):  # a transparent proxy, so the test can cut the connection
        sockets.append(ws)
        ws.connect_to_server()

    await page.route_web_socket(re.compile(r"/ws/orders/\d+/"), proxy)
    await sign_in(page, "alice", "pw-alice", f"/orders/{order.pk}/")

    steps = page.locator(".timeline .step")
    await expect(steps).to_have_count(7)
    await expect(page.locator('.step[aria-current="step"]')).to_contain_text("Order placed")
    await expect(page.locator("#order-total")).to_contain_text("18.50")
    await expect(page.locator("#live-pill")).to_have_text("Live")
    await expect(page.locator(".pin-restaurant")).to_have_count(1)
    await expect(page.locator(".pin-courier")).to_have_count(0)
    arrives = re.compile(rf"^arrives around {TIME} \({TIME}–{TIME}\)$")
    await expect(page.locator("#eta .eta-range")).to_have_text(arrives)  # from placement on
    await expect(page.locator("#eta-shift")).to_have_count(0)

    # Out for delivery, with the first GPS fix.
    t_out = now_ms() - 5_000
    times = {"ORDER_CONFIRMED": t0 + 10_000, "BEING_PREPARED": t0 + 20_000,
             "BEING_COOKED": t0 + 30_000}  # fmt: skip
    await pinot.apublish(
        order_event_of(order, 2, "OUT_FOR_DELIVERY", created_at=t0, status_time=t_out,
                       status_times=times, courier=(world.couriers[0].pk, 12.9719, 77.6412, t_out),
                       distance_left_km=4.2),
    )  # fmt: skip
    current = page.locator('.step[aria-current="step"]')
    await expect(current).to_contain_text("Out for delivery")
    await expect(page.locator('.step[data-status="ORDER_CONFIRMED"]')).to_contain_text("took 10 s")
    await expect(page.locator("#announcer")).to_contain_text("Out for delivery")
    await expect(page.locator(".pin-courier")).to_have_count(1)
    await expect(page.locator("#distance-left")).to_have_text("4.2 km")
    # The kitchen is done early: the arrival moves forward by minutes, and the page says so.
    await expect(page.locator("#eta .eta-range")).to_have_text(arrives)
    await expect(page.locator("#eta-shift")).to_have_text(re.compile(r"now earlier by \d+ min"))
    before = await page.locator(".pin-courier").evaluate("el => el.style.transform")

    # A position-only record: the marker glides to it and the trail grows.
    await pinot.apublish(
        order_event_of(order, 3, "OUT_FOR_DELIVERY", created_at=t0, status_time=t_out,
                       status_times=times, courier=(world.couriers[0].pk, 12.9650, 77.6300, now_ms()),
                       distance_left_km=2.6),
    )  # fmt: skip
    await expect(page.locator("#distance-left")).to_have_text("2.6 km")
    await page.wait_for_timeout(1600)  # the glide
    after = await page.locator(".pin-courier").evaluate("el => el.style.transform")
    assert before != after
    trail_points = await page.evaluate(
        "() => document.querySelectorAll('path.leaflet-interactive, path').length"
    )
    assert trail_points >= 1
    await screenshot(page, "order-desktop")

    # Lost connection: the banner shows, the socket comes back with ?since=<version>.
    assert len(sockets) == 1
    await sockets[0].close(code=4000, reason="test drop")
    await expect(page.locator("#connection")).to_contain_text("Connection lost")
    await expect(page.locator("#live-pill")).to_have_text("Live", timeout=15_000)
    assert "since=3" in sockets[-1].url
    await pinot.apublish(
        order_event_of(order, 4, "ARRIVING_AT_DOOR", created_at=t0, status_time=now_ms(),
                       status_times={**times, "OUT_FOR_DELIVERY": t_out},
                       courier=(world.couriers[0].pk, 12.9755, 77.6050, now_ms()),
                       distance_left_km=0.1),
    )  # fmt: skip
    await expect(current).to_contain_text("Arriving at your door")
    await expect(page.locator("#connection")).to_be_hidden()
    assert page.js_errors == []


@database_sync_to_async
def _advance_and_relay(order, steps: int) -> None:
    """Change the order as the API does and run the outbox relay; no stream job runs."""
    from tracker.orders import services
    from tracker.outbox.relay import Relay

    for _ in range(steps):
        services.advance_order(order.pk, by=SYSTEM)
    relay = Relay()
    while relay.publish_batch():
        pass


async def test_a_fast_status_shows_at_once_and_an_older_enriched_update_does_not_undo_it(
    page, pinot, asgi_lifespan
):
    world, t0 = await _tracked_world(pinot)
    order = world.order
    await sign_in(page, "alice", "pw-alice", f"/orders/{order.pk}/")
    current = page.locator('.step[aria-current="step"]')
    await expect(current).to_contain_text("Order placed")
    await expect(page.locator("#live-pill")).to_have_text("Live")

    # Three kitchen steps reach the page from the raw status events alone.
    await _advance_and_relay(order, 3)
    await expect(current).to_contain_text("In the oven")
    await expect(page.locator("#order-status")).to_contain_text("In the oven")
    await expect(page.locator("#announcer")).to_contain_text("In the oven")

    # The stream job catches up one step at a time: its record for ORDER_CONFIRMED is
    # newer by version but older by status. Its step time shows; the status stays.
    await pinot.apublish(
        order_event_of(order, 2, "ORDER_CONFIRMED", created_at=t0, status_time=t0 + 10_000),
    )
    await expect(page.locator('.step[data-status="ORDER_CONFIRMED"]')).to_contain_text("took")
    await expect(current).to_contain_text("In the oven")
    await expect(page.locator("#order-status")).to_contain_text("In the oven")
    assert page.js_errors == []


async def test_place_an_order_through_the_ui_once_despite_a_double_click(
    page, pinot, asgi_lifespan
):
    world = await amake_world(**WORLD)
    await sign_in(page, "alice", "pw-alice", "/order/new/")
    await expect(page.get_by_role("heading", name="Pizza")).to_be_visible()
    await page.get_by_role("button", name="Add Margherita to cart").click()
    await page.get_by_role("button", name="Add one more Margherita").click()
    await page.get_by_role("button", name="Add Pepsi to cart").click()
    await expect(page.locator("#cart-total")).to_contain_text("18.50")
    await expect(page.get_by_label("Deliver to")).to_contain_text("1 Church St")
    await screenshot(page, "place-order-desktop")

    before = await database_sync_to_async(Order.objects.count)()
    await page.get_by_role("button", name="Place order").dblclick()
    await page.wait_for_url(re.compile(r"/orders/\d+/$"))
    order_id = int(re.search(r"/orders/(\d+)/", page.url).group(1))
    # The new page renders after its first detail read (a full suite's load can take it
    # past the default 5 s on two cores).
    heading = page.get_by_role("heading", name=f"Order #{order_id}")
    await expect(heading).to_be_visible(timeout=15_000)
    await expect(page.locator(".items-table")).to_contain_text("Margherita")
    await expect(page.locator("#order-total")).to_contain_text("18.50")

    orders = await database_sync_to_async(
        lambda: list(Order.objects.filter(customer=world.alice).order_by("-id"))
    )()
    assert await database_sync_to_async(Order.objects.count)() == before + 1
    assert orders[0].pk == order_id and orders[0].idempotency_key
    assert page.js_errors == []


async def _operations_data(pinot, world):
    """Orders across statuses for the dashboard, and one courier in transit near the centre."""
    now = now_ms()
    order, past = world.order, world.orders[1]
    stuck_since = now - 25 * 60_000
    await pinot.apublish(
        order_event_of(
            past, 5, "DELIVERED", created_at=now - 50 * 60_000, status_time=now - 20 * 60_000
        ),
        order_event_of(
            order, 3, "BEING_COOKED", created_at=now - 30 * 60_000, status_time=stuck_since
        ),
        item_event(order.pk, 1, "Margherita", 2, 8.5, restaurant_id=order.restaurant_id),
        item_event(order.pk, 2, "Pepsi", 1, 1.5, restaurant_id=order.restaurant_id),
        item_event(past.pk, 1, "Margherita", 1, 8.5, restaurant_id=order.restaurant_id),
    )
    transit = await database_sync_to_async(place)(world.alice, world.restaurant)
    await pinot.apublish(
        order_event_of(transit, 4, "OUT_FOR_DELIVERY", created_at=now - 20 * 60_000,
                       status_time=now - 60_000, courier=(world.couriers[0].pk, *CENTRE, now)),
        delivery_event(transit.pk, 4, *CENTRE, courier_id=world.couriers[0].pk,
                       restaurant_id=transit.restaurant_id),
    )  # fmt: skip
    return transit


async def test_operator_dashboard_renders_and_the_polygon_query_finds_the_courier(
    page, pinot, monkeypatch, asgi_lifespan
):
    monkeypatch.setattr(read_model, "PREDICTION_STEP_MS", 86_400_000)  # one clock for the test
    world = await amake_world(**WORLD)
    await sign_in(page, "ops", "pw-ops", "/operations/")
    # Every restaurant's figures: the run's Pinot holds other tests' orders too, so the
    # page must add this test's (two active, one of them stuck) to what it showed.
    active, stuck_count = (
        page.locator("#kpi-active .kpi-value"),
        page.locator("#kpi-stuck .kpi-value"),
    )
    await expect(active).to_have_text(re.compile(r"^\d+$"))
    await expect(stuck_count).to_have_text(re.compile(r"^\d+$"))
    shown = int(await active.text_content()), int(await stuck_count.text_content())
    transit = await _operations_data(pinot, world)

    await expect(active).to_have_text(str(shown[0] + 2), timeout=8_000)
    await expect(stuck_count).to_have_text(str(shown[1] + 1), timeout=8_000)
    board = page.locator("#restaurant-board")
    await expect(board).to_contain_text(f"Restaurant {world.restaurant.pk}")  # Pinot's name
    # This test's row: other tests' restaurants on the run's Pinot may come first.
    row = board.locator(f'tr[data-restaurant-id="{world.restaurant.pk}"]')
    await expect(row.locator(".top-dishes li").first).to_contain_text("Margherita")
    # every restaurant's sales, this test's among them
    await expect(page.locator("#sales-chart svg rect.chart-bar-current").first).to_be_visible()
    await page.get_by_text("7 days").click()
    await expect(board.locator("caption")).to_contain_text("last 7 days")
    await expect(page.locator("#time-in-status")).to_contain_text("In the oven")
    stuck = page.locator("#stuck-orders")
    await expect(stuck).to_contain_text(f"#{world.order.pk}")
    await expect(stuck).to_contain_text("Indiranagar Pizza Co.")

    # Draw a polygon around the city centre: click four corners, then finish.
    await page.get_by_role("button", name="Draw area").click()
    box = await page.locator("#area-map").bounding_box()
    for fx, fy in [(0.3, 0.3), (0.7, 0.3), (0.7, 0.7), (0.3, 0.7)]:
        await page.mouse.click(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
        await page.wait_for_timeout(350)  # not a double-click
    await expect(page.get_by_role("button", name="Finish area")).to_be_enabled()
    await page.get_by_role("button", name="Finish area").click()
    results = page.locator("#area-results")
    await expect(results).to_contain_text(f"Order #{transit.pk}")
    await expect(results).to_contain_text(re.compile(r"\d+ deliver(y|ies) in transit"))
    arrives = rf"arrives around {TIME} \({TIME}–{TIME}\)"
    area_eta = results.locator(f'li[data-order-id="{transit.pk}"] .area-eta')
    await expect(area_eta).to_have_text(re.compile(rf"left · {arrives}$"))
    shown_to_operators = (await area_eta.text_content()).split(" · ", 1)[1]
    await screenshot(page, "operations-desktop")

    # An area away from the courier finds nothing.
    await page.get_by_role("button", name="Draw area").click()
    for fx, fy in [(0.8, 0.06), (0.96, 0.06), (0.96, 0.2)]:  # clear of the zoom buttons
        await page.mouse.click(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
        await page.wait_for_timeout(350)
    await page.keyboard.press("Enter")
    await expect(results).to_contain_text("No deliveries in transit")

    # One ETA: the order's own page shows the arrival the operators were shown.
    await page.goto(f"/orders/{transit.pk}/")
    await expect(page.locator("#eta .eta-range")).to_have_text(shown_to_operators)
    assert page.js_errors == []


async def test_operations_is_for_staff_only(page, pinot, asgi_lifespan):
    await amake_world(**WORLD)
    await sign_in(page, "alice", "pw-alice")
    response = await page.goto("/operations/")
    assert response.status == 403
    await expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()


async def test_phone_width_layout(browser, asgi_server, pinot, asgi_lifespan):
    world, _ = await _tracked_world(pinot)
    context = await browser.new_context(base_url=asgi_server.url, viewport=PHONE, is_mobile=True,
                                        has_touch=True, device_scale_factor=2)  # fmt: skip
    try:
        page = await context.new_page()
        await sign_in(page, "alice", "pw-alice")
        await expect(page.locator(f'[data-order-id="{world.order.pk}"]')).to_be_visible()
        for path, name in [("/", "my-orders-phone"), (f"/orders/{world.order.pk}/", "order-phone"),
                           ("/order/new/", "place-order-phone")]:  # fmt: skip
            await page.goto(path)
            await page.wait_for_load_state("networkidle")
            await expect(page.locator(".state-loading")).to_have_count(0)
            overflow = await page.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at phone width"
            shot = await screenshot(page, name)
            assert shot.stat().st_size > 10_000
    finally:
        await context.close()


async def test_the_skip_link_is_the_first_stop_and_moves_focus_to_the_content(
    page, pinot, asgi_lifespan
):
    """Keyboard: the skip link is the first stop and moves focus to the content. (axe-core
    and the check that every control has a name run on every page the frontend serves, on a
    phone and a desktop: tests/system/frontend/test_frontend_pages.py.)"""
    await amake_world(**WORLD)
    await sign_in(page, "ops", "pw-ops", "/operations/")
    await expect(page.locator("#kpi-active")).to_be_visible()
    await page.keyboard.press("Tab")
    await expect(page.locator(".skip-link")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#main")).to_be_focused()

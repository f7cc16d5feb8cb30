"""Courier points in the browser: the customer's marker moves on the fast path alone, and
the operators' fleet map shows every courier on the road moving, with a click through.

GPS points go through the real service and broker to the embedded push bridge; no stream
job runs, so whatever moves here came by the fast path.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from playwright.async_api import expect

from contract.events import now_ms
from tests.factories import make_courier, make_customer, make_restaurant, place
from tests.fixtures_browser import screenshot, sign_in
from tests.fixtures_pinot import order_event_of
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM

pytestmark = [pytest.mark.browser, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

START, NEXT, LATER = (12.9716, 77.5946), (12.9740, 77.5990), (12.9770, 78.0)


@database_sync_to_async
def _on_the_road() -> Order:
    alice = make_customer("alice")
    order = place(alice, make_restaurant("Indiranagar Pizza Co."))
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=make_courier())
    get_user_model().objects.create_user("ops", password="pw-ops", is_staff=True)
    return Order.objects.select_related("courier").get(pk=order.pk)


@database_sync_to_async
def _report(order: Order, point: tuple[float, float]) -> None:
    fix = services.LocationPoint(order=order, courier=order.courier, lat=point[0], lon=point[1])
    assert services.record_locations([fix]) == 1


async def _enriched(pinot, order: Order, version: int, point: tuple[float, float], at: int):
    """The stream job's record: picked up a minute ago at START, going 3.4 km north-east."""
    picked_up = now_ms() - 60_000
    record = order_event_of(
        order, version, "OUT_FOR_DELIVERY", created_at=picked_up - 600_000,
        status_time=picked_up, courier=(order.courier_id, *point, at), distance_left_km=2.0,
    )  # fmt: skip
    await pinot.apublish(
        dataclasses.replace(
            record,
            restaurant_lat=START[0],
            restaurant_lon=START[1],
            delivery_lat=12.99,
            delivery_lon=77.62,
        )  # fmt: skip
    )


async def test_the_customers_courier_moves_on_the_fast_path_and_never_back(
    page, pinot, asgi_lifespan
):
    order = await _on_the_road()
    await _enriched(pinot, order, 1, START, now_ms() - 5_000)
    await page.emulate_media(reduced_motion="reduce")  # a move lands at once: no glide
    await sign_in(page, "alice", "pw-alice", f"/orders/{order.pk}/")
    await expect(page.locator("#live-pill")).to_have_text("Live")
    courier = page.locator(".pin-courier")
    await expect(courier).to_have_count(1)
    before = await courier.evaluate("el => el.style.transform")

    await _report(order, NEXT)  # no enriched update follows: the fast path alone
    await page.wait_for_function(
        "([sel, before]) => document.querySelector(sel).style.transform !== before",
        arg=[".pin-courier", before],
    )
    moved = await courier.evaluate("el => el.style.transform")
    # The stream job's update, made from an older point, brings distance but not the point.
    await _enriched(pinot, order, 2, START, now_ms() - 3_000)
    await expect(page.locator("#distance-left")).to_have_text("2.0 km")
    await page.wait_for_timeout(600)
    assert await courier.evaluate("el => el.style.transform") == moved
    await screenshot(page, "order-fast-position")
    assert page.js_errors == []


async def test_the_fleet_map_moves_each_courier_and_clicks_through_to_its_order(
    page, pinot, asgi_lifespan
):
    order = await _on_the_road()
    await sign_in(page, "ops", "pw-ops", "/operations/")
    await expect(page.locator("#live-pill")).to_have_text("Live")
    summary = page.locator("#fleet-summary")

    # Before the bridge has the order's enriched record, a courier shows without a colour.
    await _report(order, START)
    await expect(summary).to_contain_text("1 courier on the road: 1 without a prediction")
    await _enriched(pinot, order, 1, START, now_ms() - 1_000)
    await _report(order, NEXT)
    await expect(summary).to_contain_text("1 courier on the road: 1 on time")
    drawn = f"document.getElementById('fleet-map').fleetMap.drawnAt({order.courier_id})"
    await page.wait_for_function(f"() => Math.abs({drawn}[0] - {NEXT[0]}) < 1e-6")

    # Far off its way: the next fix (a second later at most) moves it and turns it late.
    await _report(order, LATER)
    await page.wait_for_function(f"() => Math.abs({drawn}[1] - {LATER[1]}) < 1e-6")
    await expect(summary).to_contain_text(re.compile(r"1 (2–10 min late|over 10 min late)"))
    await screenshot(page, "operations-fleet")

    # Hover shows which order it carries; a click opens that order.
    fleet_map = page.locator("#fleet-map")
    await fleet_map.scroll_into_view_if_needed()
    x, y = await page.evaluate(
        f"""() => {{
            const fleet = document.getElementById('fleet-map').fleetMap;
            fleet.map.setView([{LATER[0]}, {LATER[1]}], 14, {{animate: false}});
            const p = fleet.map.latLngToContainerPoint([{LATER[0]}, {LATER[1]}]);
            return [p.x, p.y];
        }}"""
    )
    box = await fleet_map.bounding_box()
    await page.mouse.move(box["x"] + x, box["y"] + y)
    await expect(page.locator(".leaflet-tooltip")).to_contain_text(f"order #{order.pk}")
    await page.mouse.click(box["x"] + x, box["y"] + y)
    await page.wait_for_url(f"**/orders/{order.pk}/")
    assert page.js_errors == []

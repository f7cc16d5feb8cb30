"""The courier's page and socket (issue 56, item 1): who gets them, what the page is told
of the points budget, and how the socket learns of the courier's work changing.

None of these needs an engine: the page is a shell (its data comes over the socket), a
courier with nothing to carry gets an empty snapshot without a tracking read, and the
refusals and re-checks happen before any. Following deliveries live is in
tests/integration/live/test_live_courier.py (Pinot), the page itself in tests/system/frontend/test_frontend_courier.py.
"""

from __future__ import annotations

import json
import re

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from config.asgi import application
from tests.factories import make_courier, make_customer, make_restaurant, place
from tests.sockets import closed_with
from tracker.live import messages
from tracker.orders import policy, services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM


@pytest.fixture
def world(db):
    alice = make_customer("alice")
    restaurant = make_restaurant("Indiranagar Pizza Co.")
    users = get_user_model().objects
    cook = users.create_user("cook", password="pw-cook")
    restaurant.staff.add(cook)
    users.create_user("ops", password="pw-ops", is_staff=True)
    return {"alice": alice, "restaurant": restaurant, "rider": make_courier("rider")}


def _signed_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=f"pw-{username}")
    return client


def _on_the_road(order: Order, courier) -> Order:
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    return services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=courier)


def _config(response) -> dict:
    found = re.search(
        r'<script id="page-config" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    return json.loads(found.group(1))


# ---------------------------------------------------------------------- the page


def test_the_courier_page_is_for_signed_in_couriers_only(world):
    anonymous = Client().get("/courier/")
    assert anonymous.status_code == 302
    assert anonymous["Location"] == "/accounts/login/?next=/courier/"
    # Like the other role's pages (addresses, operations): anyone else gets the 403 page.
    for other in ("alice", "cook", "ops"):
        refused = _signed_in(other).get("/courier/")
        assert refused.status_code == 403, other
        assert b"This page is for couriers." in refused.content
    assert _signed_in("rider").get("/courier/").status_code == 200


def test_the_page_is_told_the_points_budget_the_api_enforces(world, settings):
    settings.LOCATION_POINTS_BURST = 300
    settings.LOCATION_POINTS_PER_SECOND = 0.5
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**rates, "locations": "120/hour"},
    }
    response = _signed_in("rider").get("/courier/")
    config = _config(response)
    assert config["gps"] == {
        "pointsPerSecond": 0.5,
        "burst": 300,
        "requestsPerMinute": 2.0,
        "batchMax": services.MAX_POINTS_PER_REQUEST,
        "aheadSeconds": services.MAX_GPS_CLOCK_SKEW_MS / 1000,
    }
    assert config["user"]["roles"] == ["courier"]
    assert config["urls"]["courier"] == "/courier/"


def test_the_page_shell_has_its_live_region_its_landmarks_and_its_module(world):
    page = _signed_in("rider").get("/courier/").content.decode()
    assert '<a href="/courier/" aria-current="page">My deliveries</a>' in page
    assert 'id="announcer" class="visually-hidden" aria-live="polite"' in page
    assert "<h1>My deliveries</h1>" in page
    assert 'id="gps-state"' in page and 'id="deliveries"' in page
    assert "frontend/js/pages/courier.js" in page
    assert "leaflet.css" in page
    # The brand leads a courier (without a customer account) to their deliveries.
    assert re.search(r'<a class="brand" href="/courier/">', page)


def test_a_courier_signs_in_to_their_deliveries_and_a_customer_sees_no_such_link(world):
    answer = Client().post("/accounts/login/", {"username": "rider", "password": "pw-rider"})
    assert answer.status_code == 302 and answer["Location"] == "/courier/"
    # A courier's own "My orders" page points to the deliveries.
    assert b'href="/courier/">your deliveries</a>' in _signed_in("rider").get("/").content
    assert b">My deliveries</a>" not in _signed_in("alice").get("/").content


# ---------------------------------------------------------------------- the policy


def test_a_courier_carries_now_only_their_deliveries_not_yet_ended(world):
    alice, restaurant, rider = world["alice"], world["restaurant"], world["rider"]
    other = make_courier("other")
    on_the_road = _on_the_road(place(alice, restaurant), rider)
    delivered = _on_the_road(place(alice, restaurant), rider)
    services.advance_order(delivered.pk, by=SYSTEM, to="ARRIVING_AT_DOOR")
    services.advance_order(delivered.pk, by=SYSTEM, to="DELIVERED")
    _on_the_road(place(alice, restaurant), other)  # someone else's
    place(alice, restaurant)  # nobody's yet
    carried = set(policy.carried_now(rider.user).values_list("pk", flat=True))
    assert carried == {on_the_road.pk}
    assert not policy.carried_now(alice.user).exists()
    assert not policy.carried_now(get_user_model().objects.get(username="ops")).exists()


# ---------------------------------------------------------------------- the socket


@pytest.fixture
def no_engines(monkeypatch, no_push_bridge):
    """No push bridge, and no tracking store (nothing listens on this port): a tracking
    read fails at once."""
    monkeypatch.setenv("PINOT_BROKER_URL", "http://127.0.0.1:9")


async def _open(client: Client) -> tuple[WebsocketCommunicator, dict]:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"cookie", cookie), (b"origin", b"http://127.0.0.1:8000")]
    socket = WebsocketCommunicator(application, "/ws/courier/", headers=headers)
    connected, _ = await socket.connect(timeout=20)
    assert connected
    return socket, await socket.receive_json_from(timeout=20)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_the_courier_socket_refuses_strangers_and_non_couriers(no_engines):
    await database_sync_to_async(make_customer)("alice")
    anonymous = WebsocketCommunicator(application, "/ws/courier/")
    assert (await anonymous.connect(timeout=20))[0]
    first = await anonymous.receive_json_from(timeout=20)
    assert first["code"] == messages.CLOSE_UNAUTHENTICATED
    socket, first = await _open(await database_sync_to_async(_signed_in)("alice"))
    assert first == {"type": "error", "code": messages.CLOSE_NOT_FOUND,
                     "message": "This socket is for couriers."}  # fmt: skip


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_periodic_recheck")
async def test_a_courier_with_nothing_to_carry_is_told_so_and_loses_the_socket_with_access(
    no_engines,
):
    rider = await database_sync_to_async(make_courier)("rider")
    browser = await database_sync_to_async(_signed_in)("rider")
    socket, first = await _open(browser)
    assert first == {"type": "snapshot", "orders": []}
    await database_sync_to_async(browser.post)("/accounts/logout/")
    await closed_with(socket, messages.CLOSE_UNAUTHENTICATED)

    # No longer a courier (the profile removed in the admin): 4404, as at connect.
    browser = await database_sync_to_async(_signed_in)("rider")
    socket, first = await _open(browser)
    assert first["type"] == "snapshot"
    await database_sync_to_async(rider.delete)()
    error = await closed_with(socket, messages.CLOSE_NOT_FOUND)
    assert error["message"] == "This socket is for couriers."


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_periodic_recheck")
async def test_an_assignment_reaches_the_couriers_open_socket(no_engines):
    """Given an order, the open socket follows it: here it must read the
    order's tracking data for the new snapshot, and with no tracking store it fails closed
    (4503, the client reconnects), as a connect would. tests/integration/live/test_live_courier.py follows
    the same assignment to its snapshot on Pinot."""

    def world():
        rider = make_courier("rider")
        order = place(make_customer("alice"), make_restaurant())
        for _ in range(3):
            services.advance_order(order.pk, by=SYSTEM)
        return rider, order

    rider, order = await database_sync_to_async(world)()
    socket, first = await _open(await database_sync_to_async(_signed_in)("rider"))
    assert first == {"type": "snapshot", "orders": []}
    await database_sync_to_async(services.advance_order)(
        order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=rider
    )
    error = await closed_with(socket, messages.CLOSE_UNAVAILABLE)
    assert error["message"] == "Tracking data is temporarily unavailable."


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_assigning_and_reassigning_ask_the_couriers_sockets_to_recheck(no_engines):
    def world():
        first, second = make_courier("rider1"), make_courier("rider2")
        order = place(make_customer("alice"), make_restaurant())
        for _ in range(3):
            services.advance_order(order.pk, by=SYSTEM)
        return first, second, order

    first, second, order = await database_sync_to_async(world)()
    layer = get_channel_layer()
    heard = {}
    for name, group in [("first", messages.user_group(first.user_id)),
                        ("second", messages.user_group(second.user_id)),
                        ("order", messages.order_group(order.pk))]:  # fmt: skip
        heard[name] = await layer.new_channel()
        await layer.group_add(group, heard[name])

    await database_sync_to_async(services.advance_order)(
        order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=first
    )
    told = await layer.receive(heard["first"])
    assert told == {"type": messages.ACCESS_RECHECK, "reason": "order assigned"}
    # A first courier takes access from nobody: the order's own sockets are left alone.
    assert await _nothing(layer, heard["order"]) and await _nothing(layer, heard["second"])

    await database_sync_to_async(services.advance_order)(
        order.pk, by=SYSTEM, to="ARRIVING_AT_DOOR", courier=second
    )
    assert (await layer.receive(heard["second"]))["reason"] == "order assigned"
    # The first courier's sockets follow the order's group: they hear it there.
    assert (await layer.receive(heard["order"]))["reason"] == "order reassigned"

    # A status change that keeps the courier announces nothing.
    await database_sync_to_async(services.advance_order)(order.pk, by=SYSTEM, to="DELIVERED")
    assert all([await _nothing(layer, channel) for channel in heard.values()])


async def _nothing(layer, channel: str, wait: float = 0.3) -> bool:
    import asyncio

    try:
        await asyncio.wait_for(layer.receive(channel), wait)
    except TimeoutError:
        return True
    return False

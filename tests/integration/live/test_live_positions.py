"""Courier positions on the fast path, and the operators' fleet: who hears of a point.

A GPS point reaches its order's sockets straight from ``delivery_locations`` (no stream
job runs here), and the operators' fleet at most once a second per courier; customers
and restaurant staff never hear of another order's courier, on REST or socket.
"""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from rest_framework.test import APIClient

from contract.events import DeliveryLocation, Topic, new_event_id, now_ms
from tests.factories import amake_world
from tests.fixtures_pinot import order_event, order_event_of
from tests.integration.live.test_live_push import WORLD, _connect, _role_tokens
from tracker.live.bridge import Bridge
from tracker.orders import services
from tracker.orders.models import Order

pytestmark = pytest.mark.django_db(transaction=True)


def _point(order_id: int, at: int, lat: float = 12.97, courier_id: int = 7):
    event = DeliveryLocation(
        event_id=new_event_id(), event_time=at, order_id=order_id,
        placed_at=at - 600_000, courier_id=courier_id, lat=lat, lon=77.59,
    )  # fmt: skip
    return Topic.DELIVERY_LOCATIONS, event.to_json()


def test_bridge_sends_a_point_to_its_order_only_newest_first_and_the_fleet_once_a_second():
    sent = []
    bridge = Bridge(sent.extend)
    clock = [100.0]
    bridge.clock = lambda: clock[0]
    t = now_ms()
    picked_up = t - 120_000
    on_road = order_event(
        5, 3, "OUT_FOR_DELIVERY", customer_id=9, restaurant_id=1, status_time=picked_up,
        courier=(7, 12.96, 77.59, picked_up),
    )  # fmt: skip
    bridge.handle([(Topic.ORDERS_ENRICHED, on_road.to_json())], fleet=True)
    sent.clear()

    # Three points of one poll: the newest by time only, to the order's group; the fleet
    # gets the courier with how late the order runs against the arrival predicted at pickup.
    bridge.handle([_point(5, t - 2000), _point(5, t, 12.98), _point(5, t - 1000)], fleet=True)
    groups = [group for group, _ in sent]
    assert groups == ["order.5", "operations"]
    position, fleet = sent[0][1], sent[1][1]
    assert position == {
        "type": "position", "order_id": 5, "courier_id": 7,
        "position": {"lat": 12.98, "lon": 77.59, "at": position["position"]["at"]},
    }  # fmt: skip
    assert fleet["type"] == "fleet" and fleet["gone"] == []
    [courier] = fleet["couriers"]
    assert (courier["courier_id"], courier["order_id"], courier["lat"]) == (7, 5, 12.98)
    assert isinstance(courier["late_seconds"], int)
    sent.clear()

    # A replayed or older point is no news; a newer one goes to the order at once, but to
    # the fleet only once its second is up (the newest point by then).
    bridge.handle([_point(5, t), _point(5, t - 500)], fleet=True)
    assert sent == []
    clock[0] += 0.5
    bridge.handle([_point(5, t + 1000, 12.99)], fleet=True)
    bridge.handle([_point(5, t + 1500, 13.0)], fleet=True)
    assert [g for g, _ in sent] == ["order.5", "order.5"]
    sent.clear()
    clock[0] += 0.5
    bridge.handle([], fleet=True)
    [(group, fleet)] = sent
    assert group == "operations" and [c["lat"] for c in fleet["couriers"]] == [13.0]
    sent.clear()

    # Delivered: the courier leaves the fleet, and a late point does not bring it back.
    delivered = order_event(
        5, 4, "DELIVERED", customer_id=9, restaurant_id=1, courier=(7, 13.0, 77.59, t)
    )
    clock[0] += 1
    bridge.handle([(Topic.ORDERS_ENRICHED, delivered.to_json()), _point(5, t + 2000)], fleet=True)
    fleets = [m for g, m in sent if g == "operations" and m["type"] == "fleet"]
    assert fleets == [{"type": "fleet", "couriers": [], "gone": [7]}]
    assert {g for g, m in sent if m["type"] == "position"} == {"order.5"}


@database_sync_to_async
def _on_the_road(order_id: int) -> Order:
    return Order.objects.select_related("restaurant", "courier").get(pk=order_id)


@database_sync_to_async
def _report(order: Order, lat: float) -> int:
    point = services.LocationPoint(order=order, courier=order.courier, lat=lat, lon=77.59)
    return services.record_locations([point])


@pytest.mark.asyncio
async def test_a_point_reaches_its_order_socket_and_the_fleet_and_no_one_else(pinot):
    world = await amake_world(**WORLD)
    order = world.order
    tokens = await _role_tokens(order)  # takes the order out for delivery with a courier
    order = await _on_the_road(order.pk)
    await pinot.apublish(order_event_of(order, 1))
    mine, _ = await _connect(f"/ws/orders/{order.pk}/", world.tokens["alice"])
    couriers, _ = await _connect(f"/ws/orders/{order.pk}/", tokens["courier"])
    fleet, _ = await _connect("/ws/operations/", tokens["operator"])
    # Everyone else who has a socket: another customer's list, the restaurant's own
    # board (staff see the order's status there, not its courier), another's board.
    bobs_list, _ = await _connect("/ws/orders/", world.tokens["bob"])
    owners_list, _ = await _connect("/ws/orders/", world.tokens["alice"])
    board, _ = await _connect(f"/ws/restaurants/{order.restaurant_id}/", tokens["staff"])

    assert await _report(order, 12.9876) == 1
    for socket in (mine, couriers):
        message = await socket.receive_json_from(timeout=10)
        assert message["type"] == "position" and message["order_id"] == order.pk
        assert (message["position"]["lat"], message["courier_id"]) == (12.9876, order.courier_id)
    message = await fleet.receive_json_from(timeout=10)
    while message["type"] == "pipeline":  # the operators' feed also carries the strip's samples
        message = await fleet.receive_json_from(timeout=10)
    assert message["type"] == "fleet"
    assert [(c["courier_id"], c["order_id"]) for c in message["couriers"]] == [
        (order.courier_id, order.pk)
    ]
    for socket in (bobs_list, owners_list, board):
        assert await socket.receive_nothing(timeout=0.5)
    for socket in (mine, couriers, fleet, bobs_list, owners_list, board):
        await socket.disconnect()


@database_sync_to_async
def _rest_views(order: Order, tokens: dict[str, str]) -> dict[str, int]:
    """Every REST read that shows a courier's position, by every role that must not."""
    asked = {
        **{(role, f"/api/v1/orders/{order.pk}/"): 404 for role in ("other_customer", "other_staff", "other_courier")},
        **{(role, "/api/v1/operations/deliveries-in-area/"): 403 for role in ("owner", "staff", "courier")},
    }  # fmt: skip
    got = {}
    for role, path in asked:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {tokens[role]}")
        if path.endswith("deliveries-in-area/"):  # a polygon around the courier
            ring = [[77.5, 12.9], [77.7, 12.9], [77.7, 13.1], [77.5, 12.9]]
            reply = client.post(path, {"type": "Polygon", "coordinates": [ring]}, format="json")
        else:
            reply = client.get(path)
        got[(role, path)] = reply.status_code
    return {key: (got[key], want) for key, want in asked.items() if got[key] != want}


@pytest.mark.asyncio
async def test_no_one_else_reads_the_couriers_position_over_rest(pinot):
    world = await amake_world(**WORLD)
    tokens = await _role_tokens(world.order)
    order = await _on_the_road(world.order.pk)
    at = now_ms()
    await pinot.apublish(
        order_event_of(order, 1, "OUT_FOR_DELIVERY", courier=(order.courier_id, 12.97, 77.59, at))
    )
    assert await _rest_views(order, tokens) == {}

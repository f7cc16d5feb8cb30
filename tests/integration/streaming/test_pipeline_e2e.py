"""The whole pipeline, end to end, with real parts: API -> database + outbox -> relay ->
Apache Kafka -> Spark Structured Streaming -> enriched topics -> Apache Pinot ->
REST reads, and -> push bridge -> WebSocket.

An order placed and driven through every status by the REST API (customer, kitchen
staff, courier) must come back through REST with its full timeline and the
courier's last position, and reach a subscribed WebSocket as it happens.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from config.asgi import application
from contract.events import LIFECYCLE
from tests.factories import make_courier, make_customer, make_restaurant
from tests.waiting import wait_until_async
from tracker.accounts.services import issue_token
from tracker.outbox.relay import Relay

pytestmark = [pytest.mark.spark, pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live_pipeline(spark, pinot, tmp_path):
    """Relay thread + a continuous Spark query, with the run's Pinot on this test's topics."""
    from streaming.job import start_query
    from streaming.settings import Settings

    query = start_query(
        spark, replace(Settings(), checkpoint_dir=str(tmp_path / "checkpoint"), available_now=False)
    )
    stop = threading.Event()
    relay = threading.Thread(target=Relay().run, args=(stop,), kwargs={"check_topics_every": 5.0})
    relay.start()
    yield pinot
    stop.set()
    relay.join(10)
    query.stop()


def _people() -> dict:
    customer, restaurant = make_customer("e2e-alice"), make_restaurant("E2E Pizza")
    courier = make_courier("e2e-rider")
    chef = get_user_model().objects.create_user("e2e-chef")
    restaurant.staff.add(chef)
    tokens = {
        role: issue_token(user).key
        for role, user in (("customer", customer.user), ("staff", chef), ("courier", courier.user))
    }
    return {
        "tokens": tokens,
        "restaurant": restaurant,
        "products": list(restaurant.products.order_by("id")),
    }


async def _place_order() -> tuple[int, dict[str, str], tuple[APIClient, APIClient, APIClient]]:
    """A customer, a restaurant's cook and a courier, and an order the customer places
    through the API as an app does (18.50). The order's id, the tokens by role, and the
    API clients of the customer, the cook and the courier."""
    people = await database_sync_to_async(_people)()
    customer, staff, courier = (_api(people["tokens"][r]) for r in ("customer", "staff", "courier"))
    products = people["products"]
    placed = await _call(customer, "post", "/api/v1/orders/", {
        "restaurant_id": people["restaurant"].pk,
        "items": [{"product_id": products[0].pk, "quantity": 2}, {"product_id": products[1].pk, "quantity": 1}],
        "delivery": {"address": "1 Church St", "lat": 12.9750, "lon": 77.6050},
    })  # fmt: skip
    return placed["id"], people["tokens"], (customer, staff, courier)


def _api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


async def _call(client: APIClient, method: str, path: str, body: dict | None = None) -> dict:
    response = await database_sync_to_async(getattr(client, method))(path, body, format="json")
    assert response.status_code < 300, (path, response.status_code, response.content[:300])
    return response.json() if response.content else {}


#: Seconds between two polls of a REST read, as an app polls: inside the customer's read
#: budget (``API_THROTTLE_READS``) however long the wait.
READ_EVERY = 1.0


async def test_an_order_driven_through_the_api_is_tracked_through_the_pipeline(
    live_pipeline, asgi_lifespan
):
    order_id, tokens, (customer, staff, courier) = await _place_order()
    detail_path = f"/api/v1/orders/{order_id}/"

    async def tracked():
        body = await _call(customer, "get", detail_path)
        return body if body["tracking"]["source"] == "pinot" else None

    first = await wait_until_async(tracked, 60, "the new order in Pinot", interval=READ_EVERY)
    assert first["status"] == "PLACED_ORDER" and first["total"] == "18.50"

    socket = WebsocketCommunicator(
        application,
        f"/ws/orders/{order_id}/",
        headers=[(b"authorization", f"Token {tokens['customer']}".encode())],
    )
    assert (await socket.connect(timeout=30))[0]
    snapshot = await socket.receive_json_from(timeout=30)
    assert snapshot["type"] == "snapshot" and snapshot["order"]["status"] == "PLACED_ORDER"

    statuses, positions = [], []
    deadline = time.monotonic() + 180  # heartbeats arrive too: bound the whole wait

    async def pushed(status: str) -> None:
        """Read the socket until ``status`` arrives (a micro-batch folds changes made within
        it into one update, so the test moves at a person's pace, one step at a time)."""
        while not statuses or statuses[-1] != status:
            assert time.monotonic() < deadline, f"statuses so far: {statuses}"
            message = await socket.receive_json_from(timeout=60)
            if message["type"] != "update":
                continue
            assert message["version"] > snapshot["version"]
            if message["kind"] == "status" and (not statuses or statuses[-1] != message["status"]):
                statuses.append(message["status"])
            if message["position"]:
                positions.append((message["position"]["lat"], message["position"]["lon"]))

    for status in LIFECYCLE[1:5]:  # ORDER_CONFIRMED .. OUT_FOR_DELIVERY, by the kitchen
        await _call(staff, "post", f"{detail_path}advance/")
        await pushed(status.value)
    route = [(12.9700, 77.6400), (12.9720, 77.6200), (12.9745, 77.6080)]
    for lat, lon in route:
        await _call(courier, "post", f"{detail_path}locations/", {"lat": lat, "lon": lon})
        await asyncio.sleep(0.05)
    for status in LIFECYCLE[5:]:  # ARRIVING_AT_DOOR, DELIVERED, by the courier
        await _call(courier, "post", f"{detail_path}advance/")
        await pushed(status.value)
    assert statuses == [s.value for s in LIFECYCLE[1:]]
    assert positions[-1] == route[-1]
    await socket.disconnect()

    async def delivered():
        body = await _call(customer, "get", detail_path)
        return body if body["status"] == "DELIVERED" else None

    final = await wait_until_async(delivered, 60, "DELIVERED through REST", interval=READ_EVERY)
    assert [s["state"] for s in final["timeline"]] == ["done"] * 6 + ["current"]
    entered = [s["entered_at"] for s in final["timeline"]]
    assert entered == sorted(entered) and None not in entered
    assert (final["position"]["lat"], final["position"]["lon"]) == route[-1]
    assert final["distance_left_km"] is not None and final["distance_left_km"] < 0.5
    past = await _call(customer, "get", "/api/v1/orders/?state=past")
    assert [o["id"] for o in past["results"]] == [order_id]

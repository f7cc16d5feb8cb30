"""REST tracking reads: served from Pinot (the local server fed through the real broker),
authorised against the system of record, per role; 503 when Pinot is down."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from contract.events import OrderStatus, now_ms
from tests.factories import make_courier, make_customer, make_restaurant, place
from tests.fixtures_pinot import delivery_event, item_event, order_event
from tracker.accounts.models import ApiToken
from tracker.accounts.services import issue_token
from tracker.customers.models import Customer
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.sharing.tokens import digest
from tracker.tracking import read_model, selectors
from tracker.tracking.serializers import to_json

pytestmark = pytest.mark.django_db

MIN = 60_000


@pytest.fixture
def world(pinot):
    alice, bob = make_customer("alice"), make_customer("bob")
    restaurant, other_restaurant = make_restaurant("Alpha"), make_restaurant("Beta")
    rider, other_rider = make_courier("rider"), make_courier("rider2")
    chef = get_user_model().objects.create_user("chef")
    restaurant.staff.add(chef)
    other_chef = get_user_model().objects.create_user("other-chef")
    other_restaurant.staff.add(other_chef)
    operator = get_user_model().objects.create_user("ops", is_staff=True)
    order = place(alice, restaurant)
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    order = services.advance_order(
        order.pk, by=SYSTEM, to=OrderStatus.OUT_FOR_DELIVERY, courier=rider
    )
    t0 = now_ms() - 20 * MIN
    times = {
        "ORDER_CONFIRMED": t0 + MIN,
        "BEING_PREPARED": t0 + 3 * MIN,
        "BEING_COOKED": t0 + 6 * MIN,
    }
    common = dict(customer_id=alice.pk, restaurant_id=restaurant.pk, created_at=t0, total=18.5)
    pinot.publish(
        order_event(order.pk, 1, "PLACED_ORDER", **common, status_time=t0),
        order_event(order.pk, 4, "BEING_COOKED", **common, status_time=t0 + 6 * MIN, status_times=times),
        order_event(
            order.pk, 6, "OUT_FOR_DELIVERY", **common, status_time=t0 + 10 * MIN,
            status_times=times, courier=(rider.pk, 12.961, 77.63, t0 + 11 * MIN),
            distance_left_km=1.25,
        ),
        order_event(order.pk, 5, "OUT_FOR_DELIVERY", **common, status_time=t0 + 10 * MIN, status_times=times),  # late
        delivery_event(order.pk, 6, 12.961, 77.63, courier_id=rider.pk, restaurant_id=restaurant.pk, at=t0 + 11 * MIN),
        item_event(order.pk, 1, "Margherita", 2, 8.5, restaurant_id=restaurant.pk, at=t0),
        item_event(order.pk, 2, "Pepsi", 1, 1.5, restaurant_id=restaurant.pk, at=t0),
    )  # fmt: skip
    pinot.sync()
    users = {
        "anonymous": None, "owner": alice.user, "other_customer": bob.user, "courier": rider.user,
        "other_courier": other_rider.user, "staff": chef, "other_staff": other_chef, "operator": operator,
    }  # fmt: skip
    return {"order": order, "users": users, "restaurant": restaurant, "t0": t0}


def _listed(client: APIClient, query: str, order_id: int) -> dict | None:
    """The order in ``client``'s list, walking its pages: an operator's list is every
    order in the run's Pinot, other tests' too."""
    url = f"/api/v1/orders/{query}"
    for _ in range(100):
        page = client.get(url).json()
        for row in page["results"]:
            if row["id"] == order_id:
                return row
        if not page.get("next"):
            return None
        url = page["next"]
    raise AssertionError(f"order {order_id} not within 100 pages of {query!r}")


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def test_order_detail_combines_the_record_with_pinots_tracking(world):
    order = world["order"]
    body = client_for(world["users"]["owner"]).get(f"/api/v1/orders/{order.pk}/").json()
    assert body["status"] == "OUT_FOR_DELIVERY"  # version 6, not the late version 5
    assert body["tracking"] == {
        "source": "pinot",
        "version": 6,
        "updated_at": body["tracking"]["updated_at"],
    }
    assert body["total"] == "18.50"
    assert [(s["status"], s["state"]) for s in body["timeline"]] == [
        ("PLACED_ORDER", "done"), ("ORDER_CONFIRMED", "done"), ("BEING_PREPARED", "done"),
        ("BEING_COOKED", "done"), ("OUT_FOR_DELIVERY", "current"), ("ARRIVING_AT_DOOR", "pending"),
        ("DELIVERED", "pending"),
    ]  # fmt: skip
    assert [s["duration_seconds"] for s in body["timeline"][:4]] == [60.0, 120.0, 180.0, 240.0]
    assert body["timeline"][4]["duration_seconds"] is None  # still in it: count from entered_at
    assert body["position"]["lat"] == 12.961
    assert body["distance_left_km"] == 1.25
    eta = body["eta"]  # on the road: the 1.25 km left, at the default speed (no history)
    assert eta["earliest"] < eta["arrives_at"] < eta["latest"]
    assert eta["computed_at"] < eta["arrives_at"] and eta["arrives_at"].endswith("Z")
    assert eta["basis"]["kitchen"] is None and eta["basis"]["speed"] == "default"
    assert eta["basis"]["route_km_left"] == round(1.25 * 1.3, 2)


def _without_clock(detail: dict) -> dict:
    """The detail minus what moves with the clock (the ETA, every PREDICTION_STEP_MS)."""
    return {**detail, "eta": None}


def test_rest_sends_the_read_models_shapes_unchanged(world):
    """REST answers with the JSON the WebSocket sends (:func:`to_json` of the read model's
    shapes), every field of each shape included."""
    order = Order.objects.get(pk=world["order"].pk)
    owner = world["users"]["owner"]
    client = client_for(owner)
    detail = client.get(f"/api/v1/orders/{order.pk}/").json()
    shown = read_model.order_detail(order.pk, viewer=owner)
    assert _without_clock(detail) == _without_clock(to_json(shown))
    assert set(detail) == {f.name for f in dataclasses.fields(shown)}
    assert detail["path"] and detail["courier"] and detail["items"]  # nested parts compared too
    listed = client.get("/api/v1/orders/").json()["results"]
    assert listed[0]["eta"]["arrives_at"] and set(listed[0]["eta"]) == set(detail["eta"])
    summary = read_model.order_summary(selectors.order_state(order.pk))
    assert [{**o, "eta": None} for o in listed] == [{**to_json(summary), "eta": None}]
    assert set(listed[0]) == {f.name for f in dataclasses.fields(summary)}


ROLE_EXPECTATIONS = {
    # role: (detail, list contains the order, time-in-status, stuck, dashboard, area)
    "anonymous": (401, None, 401, 401, 401, 401),
    "owner": (200, True, 403, 403, 403, 403),
    "other_customer": (404, False, 403, 403, 403, 403),
    "courier": (200, True, 403, 403, 403, 403),
    "other_courier": (404, False, 403, 403, 403, 403),
    "staff": (200, True, 200, 200, 200, 403),
    "other_staff": (404, False, 200, 200, 200, 403),
    "operator": (200, True, 200, 200, 200, 200),
}


@pytest.mark.parametrize("role", list(ROLE_EXPECTATIONS))
def test_every_read_endpoint_per_role(world, role):
    detail, listed, percentiles, stuck, dashboard, area = ROLE_EXPECTATIONS[role]
    client, order = client_for(world["users"][role]), world["order"]
    assert client.get(f"/api/v1/orders/{order.pk}/").status_code == detail
    response = client.get("/api/v1/orders/")
    if listed is None:
        assert response.status_code == 401
    else:
        assert response.status_code == 200
        assert (_listed(client, "", order.pk) is not None) is listed
    assert client.get("/api/v1/operations/time-in-status/").status_code == percentiles
    assert client.get("/api/v1/operations/stuck-orders/?older_than=60").status_code == stuck
    assert client.get("/api/v1/operations/restaurant-dashboard/").status_code == dashboard
    polygon = {
        "type": "Polygon",
        "coordinates": [
            [[77.6, 12.95], [77.65, 12.95], [77.65, 12.97], [77.6, 12.97], [77.6, 12.95]]
        ],
    }
    assert (
        client.post("/api/v1/operations/deliveries-in-area/", polygon, format="json").status_code
        == area
    )


def test_a_kept_order_still_lets_no_one_else_in(world):
    """Once its owner has read it, the order's placed part is kept by the process: everyone
    else is still checked against the database, and access that ends is seen at once."""
    users, url = world["users"], f"/api/v1/orders/{world['order'].pk}/"
    assert client_for(users["owner"]).get(url).status_code == 200
    for role in ("other_customer", "other_courier", "other_staff"):
        assert client_for(users[role]).get(url).status_code == 404, role
    assert client_for(users["staff"]).get(url).status_code == 200
    world["restaurant"].staff.remove(users["staff"])
    assert client_for(users["staff"]).get(url).status_code == 404
    assert client_for(users["anonymous"]).get(url).status_code == 401
    assert client_for(users["owner"]).get("/api/v1/orders/999999/").status_code == 404


def test_a_changed_order_is_seen(world, pinot, monkeypatch):
    """The kept placed part never hides what moves: status, courier position and trail;
    a conditional read answers 304 until then, and the full answer after."""
    monkeypatch.setattr(read_model, "PREDICTION_STEP_MS", 86_400_000)  # no step mid-test
    order, t0 = world["order"], world["t0"]
    client = client_for(world["users"]["owner"])
    detail_url, list_url = f"/api/v1/orders/{order.pk}/", "/api/v1/orders/?state=active"
    first, listed = client.get(detail_url), client.get(list_url)
    tags = {"detail": first["ETag"], "list": listed["ETag"]}
    assert first["Cache-Control"] == "private, no-cache" and "Authorization" in first["Vary"]
    for url, tag in ((detail_url, tags["detail"]), (list_url, tags["list"])):
        again = client.get(url, HTTP_IF_NONE_MATCH=f'W/"other", {tag}')
        assert (again.status_code, again.content, again["ETag"]) == (304, b"", tag)
    assert client.get(detail_url, HTTP_IF_NONE_MATCH='"other"').status_code == 200
    before = first.json()
    assert before["status"] == "OUT_FOR_DELIVERY" and len(before["path"]) == 1
    assert before["courier"]["name"] == "rider"
    common = dict(customer_id=order.customer_id, restaurant_id=order.restaurant_id,
                  created_at=t0, total=18.5)  # fmt: skip
    pinot.publish(
        delivery_event(order.pk, 7, 12.965, 77.62, courier_id=order.courier_id,
                       restaurant_id=order.restaurant_id, at=t0 + 12 * MIN),
        order_event(order.pk, 7, "ARRIVING_AT_DOOR", **common, status_time=t0 + 12 * MIN,
                    courier=(order.courier_id, 12.965, 77.62, t0 + 12 * MIN)),
    )  # fmt: skip
    pinot.sync()
    changed = client.get(detail_url, HTTP_IF_NONE_MATCH=tags["detail"])
    assert changed.status_code == 200 and changed["ETag"] != tags["detail"]
    changed_list = client.get(list_url, HTTP_IF_NONE_MATCH=tags["list"])
    assert changed_list.status_code == 200 and changed_list["ETag"] != tags["list"]
    after = changed.json()
    assert after["status"] == "ARRIVING_AT_DOOR" and after["tracking"]["version"] == 7
    assert after["position"]["lat"] == 12.965
    assert [p["lat"] for p in after["path"]] == [12.961, 12.965]
    assert after["items"] == before["items"] and after["total"] == before["total"]


def test_an_order_pinot_has_not_seen_shows_the_databases_changes(world):
    order = place(Customer.objects.get(user=world["users"]["owner"]), world["restaurant"])
    owner, staff = client_for(world["users"]["owner"]), client_for(world["users"]["staff"])
    first = owner.get(f"/api/v1/orders/{order.pk}/").json()
    assert first["status"] == "PLACED_ORDER" and first["tracking"]["source"] == "database"
    assert staff.post(f"/api/v1/orders/{order.pk}/advance/").status_code == 200
    second = owner.get(f"/api/v1/orders/{order.pk}/").json()
    assert second["status"] == "ORDER_CONFIRMED" and second["items"] == first["items"]
    assert owner.post(f"/api/v1/orders/{order.pk}/cancel/").json()["status"] == "CANCELLED"
    assert owner.get(f"/api/v1/orders/{order.pk}/").json()["can_cancel"] is False


def test_a_revoked_expired_or_deactivated_token_is_refused_at_once(world):
    owner, url = world["users"]["owner"], f"/api/v1/orders/{world['order'].pk}/"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(owner).key}")
    assert client.get(url).status_code == 200
    assert client.post("/api/v1/auth/logout/").status_code == 204
    assert client.get(url).status_code == 401
    key = issue_token(owner).key
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get(url).status_code == 200
    owner.is_active = False
    owner.save()
    assert client.get(url).status_code == 401
    owner.is_active = True
    owner.save()
    assert client.get(url).status_code == 200
    ApiToken.objects.filter(digest=digest(key)).update(created=timezone.now() - timedelta(days=31))
    response = client.get(url)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Token expired; sign in again."
    assert not ApiToken.objects.filter(digest=digest(key)).exists()


def test_my_orders_filters_and_paginates(world):
    client = client_for(world["users"]["owner"])
    body = client.get("/api/v1/orders/?state=active&limit=1").json()
    assert [o["id"] for o in body["results"]] == [world["order"].pk]
    assert (
        body["results"][0]["total"] == "18.50"
        and body["results"][0]["status"] == "OUT_FOR_DELIVERY"
    )
    assert "offset=1" in body["next"]
    assert client.get("/api/v1/orders/?state=past").json()["results"] == []
    assert client.get("/api/v1/orders/?status=DELIVERED").json()["results"] == []
    for query, field in [
        ("status=NOPE", "status"),
        ("state=soon", "state"),
        ("limit=0", "limit"),
        ("limit=x", "limit"),
    ]:
        response = client.get(f"/api/v1/orders/?{query}")
        assert response.status_code == 400 and field in response.json()["error"]["fields"]


def test_operator_analytics_read_pinot(world, monkeypatch):
    monkeypatch.setattr(read_model, "PREDICTION_STEP_MS", 86_400_000)  # no step mid-test
    client = client_for(world["users"]["operator"])
    # The run's Pinot holds other tests' orders too: exact figures for this test's
    # restaurant, and operators' default (every restaurant) includes them.
    mine = f"restaurant={world['restaurant'].pk}"
    rows = client.get(f"/api/v1/operations/time-in-status/?{mine}").json()["results"]
    assert [r["status"] for r in rows] == ["OUT_FOR_DELIVERY"]
    assert rows[0]["orders"] == 1 and rows[0]["p50"] >= 600
    every = client.get("/api/v1/operations/time-in-status/").json()["results"]
    assert "OUT_FOR_DELIVERY" in {r["status"] for r in every}
    stuck = client.get(f"/api/v1/operations/stuck-orders/?older_than=300&{mine}").json()
    assert [s["order_id"] for s in stuck["results"]] == [world["order"].pk]
    assert stuck["results"][0]["total"] == "18.50"
    every = client.get("/api/v1/operations/stuck-orders/?older_than=300&limit=1000").json()
    assert world["order"].pk in {s["order_id"] for s in every["results"]}
    later = client.get(f"/api/v1/operations/stuck-orders/?older_than=3600&{mine}").json()
    assert later["results"] == []
    inside = {
        "type": "Feature",
        "geometry": {
            "type": "Polygon",
            "coordinates": [[[77.6, 12.95], [77.65, 12.95], [77.65, 12.97], [77.6, 12.95]]],
        },
    }
    found = client.post("/api/v1/operations/deliveries-in-area/", inside, format="json").json()[
        "results"
    ]
    found = [f for f in found if f["order_id"] == world["order"].pk]
    assert [(f["order_id"], f["lat"]) for f in found] == [(world["order"].pk, 12.961)]
    # One ETA: the operators' area answer shows the arrival the order's own page and the
    # lists show (the learned prediction), not a separate fixed-speed estimate.
    detail = client.get(f"/api/v1/orders/{world['order'].pk}/").json()
    assert detail["eta"]["arrives_at"] and "eta_seconds" not in found[0]
    assert (
        found[0]["eta"]
        == detail["eta"]
        == _listed(client, "?state=active", world["order"].pk)["eta"]
    )
    outside = {
        "type": "Polygon",
        "coordinates": [[[77.0, 12.0], [77.1, 12.0], [77.1, 12.1], [77.0, 12.0]]],
    }
    assert (
        client.post("/api/v1/operations/deliveries-in-area/", outside, format="json").json()[
            "results"
        ]
        == []
    )
    board = client.get(
        f"/api/v1/operations/restaurant-dashboard/?restaurant={world['restaurant'].pk}"
    ).json()["results"]
    assert len(board) == 1
    hour = board[0]["windows"]["1h"]
    assert (hour["orders"], hour["sales"], hour["previous_orders"], hour["orders_change_pct"]) == (
        1,
        "18.50",
        0,
        None,
    )
    assert [d["product_name"] for d in hour["top_dishes"]] == ["Margherita", "Pepsi"]


def test_staff_dashboard_is_scoped_to_their_restaurant(world):
    client = client_for(world["users"]["staff"])
    board = client.get("/api/v1/operations/restaurant-dashboard/").json()["results"]
    assert [b["restaurant_id"] for b in board] == [world["restaurant"].pk]


def test_pinot_down_is_a_503_and_writes_still_work(world, monkeypatch):
    monkeypatch.setenv("PINOT_BROKER_URL", "http://127.0.0.1:9")  # nothing listens there
    client = client_for(world["users"]["owner"])
    response = client.get(f"/api/v1/orders/{world['order'].pk}/")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert client.get("/api/v1/orders/").status_code == 503
    restaurant = world["restaurant"]
    products = list(restaurant.products.order_by("id"))
    placed = client.post(
        "/api/v1/orders/",
        {"restaurant_id": restaurant.pk, "items": [{"product_id": products[0].pk, "quantity": 1}],
         "delivery": {"address": "x", "lat": 12.9, "lon": 77.6}},
        format="json",
    )  # fmt: skip
    assert placed.status_code == 201 and placed.json()["tracking"]["source"] == "database"

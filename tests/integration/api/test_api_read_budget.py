"""Reads of the REST API have a budget per user (issue 55): ``API_THROTTLE_READS`` for
customers and couriers, ``API_THROTTLE_READS_STAFF`` for restaurant staff and operators.
Beyond it a read is answered 429 with ``Retry-After`` and the API's error body, and every
operation that can answer so declares it in the schema. Writes keep their own budgets.
"""

from __future__ import annotations

import runpy
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from api.throttles import ReadRateThrottle, ScopedRateThrottle
from tests.factories import make_courier, make_customer, make_restaurant
from tracker.restaurants.models import Restaurant

pytestmark = pytest.mark.django_db

SETTINGS = Path(__file__).resolve().parents[3] / "config" / "settings.py"
POLYGON = {
    "type": "Polygon",
    "coordinates": [[[77.6, 12.95], [77.65, 12.95], [77.65, 12.97], [77.6, 12.97], [77.6, 12.95]]],
}


@pytest.fixture
def budgets(monkeypatch):
    """3 reads a minute, 6 for staff and operators. DRF reads the rates once, at import;
    in deployment the environment sets them (``API_THROTTLE_READS``, ``..._STAFF``)."""
    rates = {**ReadRateThrottle.THROTTLE_RATES, "reads": "3/min", "reads_staff": "6/min"}
    monkeypatch.setattr(ReadRateThrottle, "THROTTLE_RATES", rates)


@pytest.fixture
def clock(monkeypatch):
    """The throttle's clock, moved by hand."""
    now = [1_000_000.0]
    monkeypatch.setattr(ReadRateThrottle, "timer", staticmethod(lambda: now[0]))
    return now


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def reads(client: APIClient, n: int, path: str = "/api/v1/restaurants/") -> list[int]:
    return [client.get(path).status_code for _ in range(n)]


def _operator(name: str = "ops"):
    return get_user_model().objects.create_user(name, is_staff=True)


def test_the_documented_budgets_are_the_defaults():
    rates = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert (rates["reads"], rates["reads_staff"]) == ("120/min", "600/min")
    classes = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]
    assert "api.throttles.ReadRateThrottle" in classes


def test_a_customer_over_the_budget_gets_429_with_retry_after_and_an_error_body(budgets, clock):
    restaurant = make_restaurant()
    alice = client_for(make_customer("alice").user)
    # Every read endpoint spends the same budget: it is the user's, not the endpoint's.
    codes = []
    for path in ("/api/v1/me/", "/api/v1/me/addresses/", "/api/v1/restaurants/"):
        codes.append(alice.get(path).status_code)
        clock[0] += 10
    assert codes == [200, 200, 200]
    refused = alice.get(f"/api/v1/restaurants/{restaurant.pk}/menu/")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "30"  # when the first read leaves the minute
    assert refused.json() == {
        "error": {
            "status": 429,
            "code": "throttled",
            "message": "Request was throttled. Expected available in 30 seconds.",
        }
    }
    clock[0] += 29
    late = alice.get("/api/v1/me/")
    assert (late.status_code, late["Retry-After"]) == (429, "1")
    clock[0] += 1  # the first read has left the window: one more fits, then 10 s to wait
    assert reads(alice, 1) == [200]
    again = alice.get("/api/v1/me/")
    assert (again.status_code, again["Retry-After"]) == (429, "10")


def test_a_refused_read_does_not_spend_the_budget(budgets, clock):
    alice = client_for(make_customer("alice").user)
    assert reads(alice, 3) == [200, 200, 200]
    for _ in range(10):  # a client retrying at once gets nowhere, but owes nothing more
        clock[0] += 1
        assert alice.get("/api/v1/me/").status_code == 429
    clock[0] += 50  # 60 s after the first reads
    assert reads(alice, 4) == [200, 200, 200, 429]


def test_restaurant_staff_and_operators_read_on_the_higher_budget(budgets):
    chef = get_user_model().objects.create_user("chef")
    make_restaurant().staff.add(chef)
    for user in (chef, _operator()):
        assert reads(client_for(user), 7) == [200] * 6 + [429], user.username
    for user in (make_customer("alice").user, make_courier("rider").user):
        assert reads(client_for(user), 4) == [200] * 3 + [429], user.username


def test_a_user_leaving_the_staff_is_back_on_the_ordinary_budget(budgets):
    chef = get_user_model().objects.create_user("chef")
    restaurant = make_restaurant()
    restaurant.staff.add(chef)
    assert reads(client_for(chef), 4) == [200] * 4
    restaurant.staff.remove(chef)
    assert reads(client_for(chef), 1) == [429]  # 4 reads this minute: over the 3 of anyone


def test_one_users_reads_do_not_spend_anothers(budgets):
    alice, bob = make_customer("alice").user, make_customer("bob").user
    assert reads(client_for(alice), 4) == [200, 200, 200, 429]
    assert reads(client_for(bob), 3) == [200, 200, 200]
    ops, other_ops = _operator("ops"), _operator("ops2")
    assert reads(client_for(ops), 7)[-1] == 429
    assert reads(client_for(other_ops), 6) == [200] * 6


def test_writes_keep_their_own_budget_and_do_not_spend_the_reads(budgets, monkeypatch):
    writes = {**ScopedRateThrottle.THROTTLE_RATES, "writes": "2/min"}
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", writes)
    alice = client_for(make_customer("alice").user)
    url = "/api/v1/me/addresses/"
    body = {"label": "Work", "line1": "2 MG Road", "lat": 12.975, "lon": 77.606}
    assert [alice.post(url, body, format="json").status_code for _ in range(3)] == [201, 201, 429]
    assert reads(alice, 4, url) == [200, 200, 200, 429]  # all three reads still there
    bob = client_for(make_customer("bob").user)
    assert reads(bob, 4, url)[-1] == 429
    assert bob.post(url, body, format="json").status_code == 201  # reads spent, writes not


def test_a_query_sent_as_a_post_spends_the_read_budget(budgets):
    ops = client_for(_operator())
    assert reads(ops, 6) == [200] * 6
    # Refused before it reaches Pinot: the throttles run before the view.
    area = ops.post("/api/v1/operations/deliveries-in-area/", POLYGON, format="json")
    assert area.status_code == 429 and area.json()["error"]["code"] == "throttled"


def test_a_customers_read_within_budget_asks_nothing_about_staff():
    """Whether a user reads on the staff budget is asked only once the ordinary one is
    spent: a customer's read pays no query for it."""
    make_restaurant()
    alice = client_for(make_customer("alice").user)
    staff_table = Restaurant.staff.through._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        assert alice.get("/api/v1/restaurants/").status_code == 200
    assert not [q["sql"] for q in queries if staff_table in q["sql"]]


def test_the_public_schema_and_docs_spend_no_budget(budgets):
    alice = client_for(make_customer("alice").user)
    assert reads(alice, 4)[-1] == 429
    assert alice.get("/api/schema/").status_code == 200
    assert alice.get("/api/docs/").status_code == 200


def test_every_throttled_operation_declares_its_429_with_retry_after():
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    unthrottled = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            refused = operation["responses"].get("429")
            if refused is None:
                unthrottled.append(operation["operationId"])
                continue
            header = refused["headers"]["Retry-After"]
            assert header["required"] and header["schema"]["type"] == "integer", path
            assert refused["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"
            }
            assert "ETag" not in refused["headers"], path  # only 200 and 304 carry one
    # each revokes the caller's own tokens (one, or all): nothing to spend
    assert sorted(unthrottled) == ["signOut", "signOutEverywhere"]


def test_a_staff_budget_below_the_ordinary_one_is_refused_at_start(monkeypatch):
    monkeypatch.setenv("API_THROTTLE_READS", "120/min")
    monkeypatch.setenv("API_THROTTLE_READS_STAFF", "60/min")
    with pytest.raises(ImproperlyConfigured, match="API_THROTTLE_READS_STAFF"):
        runpy.run_path(str(SETTINGS))


def test_a_304_spends_the_read_budget_like_a_200(pinot, budgets):
    """A free 304 would leave the budget open to ``If-None-Match: *`` in a loop."""
    alice = client_for(make_customer("alice").user)
    first = alice.get("/api/v1/orders/")
    assert first.status_code == 200
    again = [
        alice.get("/api/v1/orders/", HTTP_IF_NONE_MATCH=tag).status_code
        for tag in (first["ETag"], "*", "*")
    ]
    assert again == [304, 304, 429]


class _SlowCache:
    """The throttle's cache, each read answered 20 ms late: concurrent reads interleave, as they do
    across the web workers of a busy deployment."""

    def __init__(self, cache):
        self._cache = cache

    def __getattr__(self, name):
        attr = getattr(self._cache, name)
        if name in ("get", "get_many"):

            def slow(*args, **kwargs):
                value = attr(*args, **kwargs)
                time.sleep(0.02)  # between reading the count and writing it back
                return value

            return slow
        return attr


def test_concurrent_reads_each_spend_the_budget(monkeypatch):
    """8 clients of one user read 3 times each at once: all 24 count, so a 24/min budget
    refuses the 25th (a check-then-write budget counted some once)."""
    from django.core.cache import cache

    rates = {**ReadRateThrottle.THROTTLE_RATES, "reads": "24/min", "reads_staff": "48/min"}
    monkeypatch.setattr(ReadRateThrottle, "THROTTLE_RATES", rates)
    monkeypatch.setattr(ReadRateThrottle, "cache", _SlowCache(cache))
    user = make_customer("alice").user
    request = SimpleNamespace(user=user, method="GET")
    view = SimpleNamespace()
    start = threading.Barrier(8)

    def client() -> list[bool]:
        start.wait()
        return [ReadRateThrottle().allow_request(request, view) for _ in range(3)]

    with ThreadPoolExecutor(8) as pool:
        admitted = [ok for answers in pool.map(lambda _: client(), range(8)) for ok in answers]
    assert admitted == [True] * 24
    assert ReadRateThrottle().allow_request(request, view) is False  # the 25th read

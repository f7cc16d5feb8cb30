"""Which restaurant a request is about is one question with one answer, on the restaurant
pages and the analytics API alike (:func:`tracker.orders.policy.restaurant_scope`): the
one named if the caller may follow it, or a staff member's only one; staff of several
who name none are asked to choose, and a restaurant not theirs is refused.
"""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import make_restaurant

pytestmark = pytest.mark.django_db

PAGES = ("/restaurant/", "/restaurant/board/")
#: An analytics read that asks the policy for its restaurant before it reads Pinot.
READ = "/api/v1/operations/time-in-status/"


@pytest.fixture
def world():
    pizza, curry, dosa = (
        make_restaurant("Indiranagar Pizza Co."),
        make_restaurant("Koramangala Curry"),
        make_restaurant("Jayanagar Dosa"),
    )
    users = get_user_model().objects
    cook = users.create_user("cook", password="pw-cook")
    owner = users.create_user("owner", password="pw-owner")
    ops = users.create_user("ops", password="pw-ops", is_staff=True)
    pizza.staff.add(cook, owner)
    curry.staff.add(owner)
    return {"pizza": pizza, "curry": curry, "dosa": dosa, "cook": cook, "owner": owner, "ops": ops}


def _page(user, path: str) -> tuple[int, dict]:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    found = re.search(
        r'<script id="page-config" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    return response.status_code, json.loads(found.group(1)) if found else {}


def _api(user, query: str = "") -> tuple[int, dict]:
    client = APIClient()
    client.force_authenticate(user)
    response = client.get(READ + query)
    return response.status_code, response.json()


def test_staff_of_several_restaurants_naming_none_are_asked_to_choose_on_pages_and_api(world):
    status, body = _api(world["owner"])
    assert status == 400
    asked = body["error"]["fields"]["restaurant"][0]
    for path in PAGES:
        status, config = _page(world["owner"], path)
        assert status == 200, path
        assert config["restaurant"] is None and config["prompt"] == asked, path
        assert [r["name"] for r in config["restaurants"]] == [
            "Indiranagar Pizza Co.",
            "Koramangala Curry",
        ]


def test_staff_of_one_restaurant_get_it_without_naming_it(world):
    for path in PAGES:
        status, config = _page(world["cook"], path)
        assert status == 200 and config["restaurant"]["id"] == world["pizza"].pk, path


def test_a_named_restaurant_is_shown_when_it_is_theirs_and_refused_alike_when_not(world):
    curry, dosa = world["curry"].pk, world["dosa"].pk
    for path in PAGES:
        status, config = _page(world["owner"], f"{path}?restaurant={curry}")
        assert status == 200 and config["restaurant"]["id"] == curry, path
        assert _page(world["owner"], f"{path}?restaurant={dosa}")[0] == 403, path
        assert _page(world["cook"], f"{path}?restaurant={curry}")[0] == 403, path
    assert _api(world["owner"], f"?restaurant={dosa}")[0] == 403
    assert _api(world["cook"], f"?restaurant={curry}")[0] == 403


def test_operators_name_any_restaurant_and_are_asked_on_a_page_when_they_name_none(world):
    """To the API an operator naming none means every restaurant; a page shows one, so it
    asks which."""
    ops = world["ops"]
    status, config = _page(ops, "/restaurant/")
    assert status == 200 and config["restaurant"] is None
    assert len(config["restaurants"]) == 3
    status, config = _page(ops, f"/restaurant/board/?restaurant={world['dosa'].pk}")
    assert status == 200 and config["restaurant"]["name"] == "Jayanagar Dosa"
    assert _page(ops, "/restaurant/?restaurant=999999")[0] == 404

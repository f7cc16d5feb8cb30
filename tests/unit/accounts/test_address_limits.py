"""A customer's delivery addresses are capped and their writes throttled (issue 53, L7).

Unlimited, unthrottled addresses let one account grow its rows without bound, and
``/me/`` returns them all on every call.
"""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient
from rest_framework.throttling import ScopedRateThrottle

from tests.factories import make_customer

pytestmark = pytest.mark.django_db

URL = "/api/v1/me/addresses/"


def _address(n: int) -> dict:
    return {"label": f"Place {n}", "line1": f"{n} MG Road", "lat": 12.97, "lon": 77.61}


def _client(customer) -> APIClient:
    client = APIClient()
    client.force_authenticate(customer.user)
    return client


def test_a_customer_has_at_most_the_configured_number_of_addresses():
    assert django_settings.CUSTOMER_MAX_ADDRESSES == 20  # the documented default
    alice = make_customer("alice")
    api = _client(alice)
    have = len(api.get(URL).json())
    codes = [api.post(URL, _address(n), format="json").status_code for n in range(25 - have)]
    assert codes == [201] * (20 - have) + [400] * 5
    refused = api.post(URL, _address(99), format="json").json()["error"]
    assert "at most 20" in refused["message"]
    assert len(api.get("/api/v1/me/").json()["addresses"]) == 20
    # Deleting one makes room again.
    first = api.get(URL).json()[0]["id"]
    assert api.delete(f"{URL}{first}/").status_code == 204
    assert api.post(URL, _address(100), format="json").status_code == 201


def test_address_writes_spend_the_writes_budget(monkeypatch):
    monkeypatch.setattr(
        ScopedRateThrottle,
        "THROTTLE_RATES",
        {**ScopedRateThrottle.THROTTLE_RATES, "writes": "3/min"},
    )
    api = _client(make_customer("alice"))
    created = api.post(URL, _address(1), format="json").json()
    codes = [
        api.patch(f"{URL}{created['id']}/", {"label": "Home 2"}, format="json").status_code,
        api.post(URL, _address(2), format="json").status_code,
        api.post(URL, _address(3), format="json").status_code,
    ]
    assert codes == [200, 201, 429]
    assert api.get(URL).status_code == 200  # reading is not a write

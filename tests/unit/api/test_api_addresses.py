"""Delivery addresses over the API (the browser page uses the same endpoints)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import make_customer

pytestmark = pytest.mark.django_db


def _client(customer) -> APIClient:
    client = APIClient()
    client.force_authenticate(customer.user)
    return client


def test_one_default_at_a_time_and_deleting_it_promotes_the_oldest_left():
    alice = make_customer("alice")
    api = _client(alice)
    (home,) = api.get("/api/v1/me/addresses/").json()
    work = api.post(
        "/api/v1/me/addresses/",
        {"label": "Work", "line1": "80 MG Road", "lat": 12.97, "lon": 77.61},
        format="json",
    ).json()
    gym = api.post(
        "/api/v1/me/addresses/",
        {"label": "Gym", "line1": "5 Lake Rd", "lat": 12.96, "lon": 77.6, "is_default": True},
        format="json",
    ).json()

    def defaults() -> list[str]:
        return [a["label"] for a in api.get("/api/v1/me/addresses/").json() if a["is_default"]]

    assert defaults() == ["Gym"]
    assert (
        api.patch(
            f"/api/v1/me/addresses/{work['id']}/", {"is_default": True}, format="json"
        ).status_code
        == 200
    )
    assert defaults() == ["Work"]
    assert api.delete(f"/api/v1/me/addresses/{work['id']}/").status_code == 204
    assert defaults() == [home["label"]]  # the oldest remaining
    assert api.delete(f"/api/v1/me/addresses/{gym['id']}/").status_code == 204
    assert defaults() == [home["label"]]


def test_an_address_is_validated_and_belongs_to_its_customer_only():
    alice, bob = make_customer("alice"), make_customer("bob")
    api = _client(alice)
    bad = api.post(
        "/api/v1/me/addresses/", {"line1": "", "lat": 95, "lon": 77.6}, format="json"
    ).json()["error"]
    assert set(bad["fields"]) == {"line1", "lat"}
    assert "less than or equal to 90" in bad["fields"]["lat"][0]
    bobs = bob.addresses.get()
    assert (
        api.patch(f"/api/v1/me/addresses/{bobs.pk}/", {"line1": "x"}, format="json").status_code
        == 404
    )
    assert api.delete(f"/api/v1/me/addresses/{bobs.pk}/").status_code == 404
    bobs.refresh_from_db()
    assert bobs.line1 == "1 Church St"


def test_the_admin_keeps_one_default_address_too():
    from django.contrib.auth import get_user_model
    from django.test import Client

    alice = make_customer("alice")
    home = alice.addresses.get()
    work = alice.addresses.create(label="Work", line1="80 MG Road", lat=12.97, lon=77.61)
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("ops", password="pw-ops-long"))
    form = {"customer": alice.pk, "label": "Work", "line1": "80 MG Road", "city": "Bengaluru",
            "lat": "12.97", "lon": "77.61", "is_default": "on"}  # fmt: skip
    response = admin.post(f"/admin/customers/address/{work.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:500]
    assert list(alice.addresses.filter(is_default=True)) == [work]

    response = admin.post(f"/admin/customers/address/{work.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert list(alice.addresses.filter(is_default=True)) == [home]  # promoted

"""A courier sees what they carry now, and a delivery they ended for a short grace only
(issue 69, N10): not every customer's name, address and items they ever carried.

The policy decides (:func:`tracker.orders.policy.visible_orders`, :func:`~.can_see`,
:func:`~.list_scope`); the REST detail, the order sockets' re-checks and the pages all ask it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.orders import policy, services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM

pytestmark = pytest.mark.django_db


def _carried(courier, customer, restaurant, *, ended: str | None = None, ago=timedelta(0)):
    """An order ``courier`` took on the road (delivered ``ago`` when ``ended``): a courier
    is assigned on the way out, past the point an order can be cancelled."""
    order = place(customer, restaurant)
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=courier)
    if ended == "DELIVERED":
        services.advance_order(order.pk, by=SYSTEM, to="ARRIVING_AT_DOOR")
        services.advance_order(order.pk, by=SYSTEM, to="DELIVERED")
    Order.objects.filter(pk=order.pk).update(status_changed_at=timezone.now() - ago)
    return order


def test_a_courier_sees_what_they_carry_now_and_a_short_grace_after(settings, monkeypatch):
    monkeypatch.setenv("PINOT_BROKER_URL", "http://127.0.0.1:9")  # no tracking store
    courier, restaurant = make_courier(), make_restaurant()
    alice, bob, carol = (make_customer(n) for n in ("alice", "bob", "carol"))
    on_the_road = _carried(courier, alice, restaurant)
    just_delivered = _carried(
        courier, bob, restaurant, ended="DELIVERED", ago=timedelta(minutes=30)
    )
    long_delivered = _carried(courier, carol, restaurant, ended="DELIVERED", ago=timedelta(hours=3))
    user = courier.user

    seen = set(policy.visible_orders(user).values_list("pk", flat=True))
    assert seen == {on_the_road.pk, just_delivered.pk}
    assert not policy.can_see(user, long_delivered.pk)
    scope = policy.list_scope(user, "courier")  # what the list asks the tracking store
    assert set(scope["order_ids"]) == {on_the_road.pk, just_delivered.pk}

    client = APIClient()
    client.force_authenticate(user)
    assert client.get(f"/api/v1/orders/{long_delivered.pk}/").status_code == 404

    settings.COURIER_ORDER_GRACE = timedelta(minutes=10)  # the grace is a setting
    assert not policy.can_see(user, just_delivered.pk)
    assert policy.can_see(user, on_the_road.pk)

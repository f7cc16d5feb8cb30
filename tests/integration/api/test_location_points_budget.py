"""A courier's GPS points are budgeted in points, per courier and order (issue 53, M2).

The request throttle (``API_THROTTLE_LOCATIONS``) counts requests, and a request may carry
500 points: one account could push thousands of points a second. The points budget is a
token bucket of ``API_LOCATION_POINTS_BURST`` points (a phone's offline queue) refilled at
``API_LOCATION_POINTS_PER_SECOND``; beyond it, 429 with ``Retry-After``.
"""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.orders import services
from tracker.orders.policy import SYSTEM

pytestmark = pytest.mark.django_db


def _on_the_road(customer: str, rider):
    order = place(make_customer(customer), make_restaurant(f"{customer}'s pizza"))
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    return services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=rider)


def _batch(n: int) -> dict:
    return {"points": [{"lat": 12.9 + i * 1e-5, "lon": 77.6} for i in range(n)]}


def test_a_flood_of_point_batches_is_refused_beyond_the_points_budget(kafka_topics):
    rider, other_rider = make_courier("rider"), make_courier("other")
    order, others = _on_the_road("alice", rider), _on_the_road("bob", other_rider)
    courier = APIClient()
    courier.force_authenticate(rider.user)
    url = f"/api/v1/orders/{order.pk}/locations/"
    codes = [courier.post(url, _batch(500), format="json").status_code for _ in range(3)]
    assert codes == [202, 202, 429]  # 1,000 points fit the 1,200-point burst; 1,500 do not
    assert django_settings.LOCATION_POINTS_PER_SECOND == 2.0  # the documented defaults
    assert django_settings.LOCATION_POINTS_BURST == 1200
    refused = courier.post(url, _batch(500), format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    # 300 points missing at 2 points/s: 150 s
    assert 140 <= int(refused["Retry-After"]) <= 150
    # What is left of the burst still takes a smaller batch.
    assert courier.post(url, _batch(100), format="json").status_code == 202
    # Another courier's budget is their own.
    theirs = APIClient()
    theirs.force_authenticate(other_rider.user)
    other_url = f"/api/v1/orders/{others.pk}/locations/"
    assert theirs.post(other_url, _batch(500), format="json").status_code == 202


def test_the_points_budget_refills_at_its_rate():
    from tracker.accounts.security import TokenBucket

    now = [1_000.0]
    bucket = TokenBucket("test-refill", rate=2.0, burst=10, clock=lambda: now[0])
    assert bucket.take(10) is None
    assert bucket.take(1) == pytest.approx(0.5)  # one point is 0.5 s away
    now[0] += 2.5  # five points back
    assert bucket.take(5) is None
    assert bucket.take(1) is not None
    now[0] += 3600  # idle for an hour: full again, never more than the burst
    assert bucket.take(10) is None
    assert bucket.take(1) is not None

"""The browser side of notifications (issue 71): the service worker served from the site's
root, so that it may control every page, and the customer's settings page.

What the worker and the page do in a browser is tested in Chromium
(tests/system/frontend/test_frontend_notifications.py); here, who gets what.
"""

from __future__ import annotations

import pytest
from django.test import Client

from frontend.views import SERVICE_WORKER
from tests.factories import make_courier, make_customer

pytestmark = pytest.mark.django_db


def test_the_service_worker_is_served_from_the_root_to_anyone_and_revalidated():
    answer = Client().get("/sw.js")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/javascript")
    assert answer["Cache-Control"] == "no-cache"
    assert answer.content == SERVICE_WORKER.read_bytes()
    assert "worker-src 'self'" in answer["Content-Security-Policy"]
    assert Client().post("/sw.js").status_code == 405


def test_the_settings_page_is_for_customers_and_linked_from_their_pages():
    customer, courier = Client(), Client()
    customer.force_login(make_customer("alice").user)
    courier.force_login(make_courier("rider").user)
    page = customer.get("/settings/notifications/")
    assert page.status_code == 200
    assert b'id="prefs-form"' in page.content
    assert b'href="/settings/notifications/"' in customer.get("/addresses/").content
    assert courier.get("/settings/notifications/").status_code == 403
    assert Client().get("/settings/notifications/").status_code == 302  # sign in first

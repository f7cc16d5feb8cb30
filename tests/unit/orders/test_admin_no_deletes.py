"""Orders and their events are never deleted from the admin (issue 53, L2).

A delete there bypasses the outbox: Pinot keeps the order, an unpublished change is lost,
and a process's kept copy still serves the deleted order to its customer. Orders end by
cancelling (the admin's action, through the services).
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

from tests.factories import make_customer, make_restaurant, place
from tracker.orders.models import Order, OrderItem, OrderStatusChange
from tracker.outbox.models import OutboxEvent

pytestmark = pytest.mark.django_db

MODELS = [Order, OrderItem, OrderStatusChange, OutboxEvent]


@pytest.fixture
def superuser_browser() -> Client:
    browser = Client()
    browser.force_login(get_user_model().objects.create_superuser("root", password="x" * 12))
    return browser


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_admin_offers_no_delete_for_orders_and_their_events(model, superuser_browser, rf):
    order = place(make_customer("alice"), make_restaurant())
    if model is Order:
        row = order
    elif model is OutboxEvent:
        row = OutboxEvent.objects.first()
    else:
        row = model.objects.filter(order=order).first()
    model_admin = admin.site._registry[model]
    request = rf.get("/admin/")
    request.user = get_user_model().objects.get(username="root")
    assert not model_admin.has_delete_permission(request, row)
    assert "delete_selected" not in model_admin.get_actions(request)
    meta = model._meta
    page = superuser_browser.get(f"/admin/{meta.app_label}/{meta.model_name}/{row.pk}/delete/")
    assert page.status_code == 403
    assert model.objects.filter(pk=row.pk).exists()


def test_the_order_pages_inlines_cannot_delete_items_or_history(superuser_browser, rf):
    request = rf.get("/admin/")
    request.user = get_user_model().objects.get(username="root")
    order_admin = admin.site._registry[Order]
    for inline in order_admin.get_inline_instances(request):
        assert not inline.has_delete_permission(request), type(inline).__name__

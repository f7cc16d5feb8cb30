"""Announce the admin's changes to what the read model keeps per process.

:mod:`tracker.tracking.copies` keeps each order's placed part (its customer, the
restaurant's and products' names) and couriers' names. The services never change
those, but the admin (or a shell) can: move a customer profile to another user, rename
a restaurant, a product, a user. Each such save is announced to every process
(:mod:`tracker.notices`), which drops the copies it touches. ``QuerySet.update()``
sends no signal and is not announced.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save

from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.notices.services import announce
from tracker.restaurants.models import Product, Restaurant

#: Model -> the topic its copies are dropped under (:mod:`tracker.tracking.copies` subscribes to these).
TOPICS = {
    Customer: "copies.customer",
    Courier: "copies.courier",
    Restaurant: "copies.restaurant",
    Product: "copies.product",
}


def _changed(sender: Any, instance: Any, created: bool = False, raw: bool = False, **kw: Any):
    if not created and not raw:  # nothing is kept of what did not exist
        announce(TOPICS[sender], instance.pk)


def _user_changed(sender: Any, instance: Any, created: bool = False, raw: bool = False, **kw):
    """A user's names are their customer's and courier's display names."""
    update_fields = kw.get("update_fields")
    if created or raw or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    for model in (Customer, Courier):
        for pk in model.objects.filter(user_id=instance.pk).values_list("pk", flat=True):
            announce(TOPICS[model], pk)


def connect() -> None:
    for model in TOPICS:
        post_save.connect(_changed, sender=model, dispatch_uid=f"copies-saved-{model.__name__}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"copies-gone-{model.__name__}")
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="copies-user-saved")

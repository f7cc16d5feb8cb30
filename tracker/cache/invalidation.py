"""Announce the admin's changes to what every process caches, and drop what they touch.

:mod:`tracker.cache.reads` caches each order's placed part (its customer, the
restaurant's and products' names) and couriers' names. The services never change
those, but the admin (or a shell) can: move a customer profile to another user, rename
a restaurant, a product, a user. Each such save is announced to every process
(:mod:`tracker.notices`), whose listener drops the entries it touches.
``QuerySet.update()`` sends no signal and is not announced.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save

from tracker.cache import reads
from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.notices import listener
from tracker.notices.services import announce
from tracker.restaurants.models import Product, Restaurant

#: Model -> the notice topic its saves are announced under.
TOPICS = {
    Customer: "cache.customer",
    Courier: "cache.courier",
    Restaurant: "cache.restaurant",
    Product: "cache.product",
}


#: Topic -> what a process drops on its notice: the entries naming that key.
DROPS = {
    "cache.customer": lambda pk: reads.drop_placed(lambda p: p.customer.id == pk),
    "cache.restaurant": lambda pk: reads.drop_placed(lambda p: p.restaurant.id == pk),
    "cache.product": lambda pk: reads.drop_placed(
        lambda p: any(i.product_id == pk for i in p.items)
    ),
    "cache.courier": reads.drop_courier_name,
}


def _announce(topic: str, pk: int) -> None:
    """Tell every process, and drop here at once: this process's next read is fresh
    (the notice drops again after the commit, in case a read cached the old row since)."""
    announce(topic, pk)
    DROPS[topic](pk)


def _changed(sender: Any, instance: Any, created: bool = False, raw: bool = False, **kw: Any):
    if not created and not raw:  # nothing is cached of what did not exist
        _announce(TOPICS[sender], instance.pk)


def _user_changed(sender: Any, instance: Any, created: bool = False, raw: bool = False, **kw):
    """A user's names are their customer's and courier's display names."""
    update_fields = kw.get("update_fields")
    if created or raw or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    for model in (Customer, Courier):
        for pk in model.objects.filter(user_id=instance.pk).values_list("pk", flat=True):
            _announce(TOPICS[model], pk)


def connect() -> None:
    """Announce the admin's saves (model signals), and drop on each announcement (the
    notice listener's topics). Called once, from the app's ``ready()``."""
    for model in TOPICS:
        post_save.connect(_changed, sender=model, dispatch_uid=f"cache-saved-{model.__name__}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"cache-gone-{model.__name__}")
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="cache-user-saved")
    for topic, drop in DROPS.items():
        listener.subscribe(topic, drop)
    listener.on_resync(lambda: (reads.drop_placed(), reads.drop_courier_name()))
    listener.on_read(reads.trust_until)

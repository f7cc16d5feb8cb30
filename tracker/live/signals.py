"""Tell open WebSockets to re-check their access when it may have changed.

Authorisation is decided at connect; these receivers make it hold for the whole
life of a socket. On logout (session flushed, token deleted), token expiry, a password
change (which revokes the user's token and sessions: ``tracker.live.auth.current_user``),
deactivation, removal from a restaurant's staff or any other change to a user, every
socket of that user is asked to re-check; when an order's customer or courier changes, or
one of its shared tracking links is revoked or deleted, every socket on that order is (a
link's sockets are on its order's group); when an order is given to a courier, every
socket of that courier's user is (the courier's page follows its new delivery). The message goes through the channel layer
after the transaction commits, so with Redis it reaches every ASGI server within
milliseconds. A socket whose check fails closes with 4401 (credential gone) or 4404
(order no longer yours, or its link no longer works).

The in-memory channel layer (embedded mode) reaches only this process, so every
change is also announced through the database (:mod:`tracker.notices`): each web
process with open sockets reads those notices every 0.2 s and passes them to its own
layer (:func:`relay_access_notices`), whichever process made the change. Sockets
also re-check every ``PUSH_RECHECK_SECONDS`` for what no signal announces (bulk
``QuerySet.update``, a token reaching its expiry).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_init, post_save, pre_save

from tracker.accounts.models import ApiToken
from tracker.cache import outage
from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.live import messages as m
from tracker.notices import listener
from tracker.notices.services import announce
from tracker.orders.models import Order
from tracker.restaurants.models import Restaurant
from tracker.sharing.models import ShareLink

log = logging.getLogger(__name__)


def _send(group: str, reason: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": m.ACCESS_RECHECK, "reason": reason})
    except Exception:  # noqa: BLE001 - a write must never fail because a push did
        log.exception("could not ask %s to re-check its access; the periodic check will", group)


def notify_user(user_id: int | None, reason: str) -> None:
    """Also drops what this process kept of the user for an outage (other processes: on
    the notice), at once: the database may be gone before the listener reads again."""
    if user_id is not None:
        outage.drop_user(user_id)  # now, and again after the commit (a read meanwhile)
        transaction.on_commit(
            lambda: (outage.drop_user(user_id), _send(m.user_group(user_id), reason))
        )
        announce(USER_TOPIC, user_id)


def notify_order(order_id: int, reason: str) -> None:
    outage.drop_order(order_id)
    transaction.on_commit(
        lambda: (outage.drop_order(order_id), _send(m.order_group(order_id), reason))
    )
    announce(ORDER_TOPIC, order_id)


#: Notice topics (tracker.notices) of the two groups a re-check goes to; the answers kept
#: for an outage are dropped on them too (:mod:`tracker.cache.outage`).
USER_TOPIC, ORDER_TOPIC = outage.USER_TOPIC, outage.ORDER_TOPIC
_relays: dict[asyncio.AbstractEventLoop, Any] = {}
_relays_lock = threading.Lock()


def relay_access_notices(loop: asyncio.AbstractEventLoop, layer: Any) -> None:
    """Pass access notices from every process to this process's sockets on ``loop``.

    Needed only where the channel layer reaches no other process (the in-memory layer
    of embedded mode); with Redis, :func:`_send` already reached every server."""
    if not isinstance(layer, InMemoryChannelLayer):
        return
    with _relays_lock:
        first = not _relays
        _relays[loop] = layer
        for gone in [other for other in _relays if other.is_closed()]:
            del _relays[gone]
    if first:
        listener.subscribe(USER_TOPIC, lambda pk: _relay(m.user_group(pk)))
        listener.subscribe(ORDER_TOPIC, lambda pk: _relay(m.order_group(pk)))
    listener.ensure_started()


def _relay(group: str) -> None:
    message = {"type": m.ACCESS_RECHECK, "reason": "changed in another process"}
    with _relays_lock:
        targets = [(loop, layer) for loop, layer in _relays.items() if not loop.is_closed()]
    for loop, layer in targets:
        asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)


def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    notify_user(getattr(user, "pk", None), "logout")


def _token_deleted(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    notify_user(instance.user_id, "token revoked")


def _user_saved(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return  # every sign-in saves last_login: nothing about access changed
    notify_user(instance.pk, "user changed")


def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    notify_user(instance.pk, "user deleted")


def _parties(order: Order) -> tuple[int, int | None] | None:
    """(customer id, courier id) as loaded; None when a deferred load left them out
    (reading them would cost a query per instance)."""
    fields = order.__dict__
    if "customer_id" not in fields or "courier_id" not in fields:
        return None
    return (fields["customer_id"], fields["courier_id"])


def _order_loaded(sender: Any, instance: Order, **kwargs: Any) -> None:
    instance._loaded_parties = _parties(instance)


def _order_saved(sender: Any, instance: Order, created: bool, **kwargs: Any) -> None:
    before, after = getattr(instance, "_loaded_parties", None), _parties(instance)
    if not created and before is not None and after is not None:
        customer_changed = before[0] != after[0]
        courier_replaced = before[1] is not None and before[1] != after[1]
        if customer_changed or courier_replaced:  # someone lost access (a first courier: no)
            notify_order(instance.pk, "order reassigned")
        if after[1] is not None and before[1] != after[1]:
            notify_user(_courier_user(instance), "order assigned")
    instance._loaded_parties = after


def _courier_user(order: Order) -> int | None:
    """The user id of the order's courier: from the courier the caller set on it when
    it did (the order services do), else one query."""
    if Order.courier.is_cached(order) and order.courier is not None:
        return order.courier.user_id
    return Courier.objects.filter(pk=order.courier_id).values_list("user_id", flat=True).first()


def _share_link_saved(sender: Any, instance: ShareLink, created: bool, **kwargs: Any) -> None:
    """A link changed after it was made (revoked): its sockets, on its order, re-check."""
    if not created:
        notify_order(instance.order_id, "share link revoked")


def _share_link_deleted(sender: Any, instance: ShareLink, **kwargs: Any) -> None:
    notify_order(instance.order_id, "share link deleted")


def _profile_saving(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    """A customer or courier profile moved to another user (the admin can): the user it
    leaves re-checks, after the commit."""
    if raw or instance.pk is None:
        return
    before = sender.objects.filter(pk=instance.pk).values_list("user_id", flat=True).first()
    if before is not None and before != instance.user_id:
        notify_user(before, "profile moved to another user")


def _profile_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    notify_user(instance.user_id, "profile deleted")


def _staff_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    """Someone left a restaurant's staff: their kitchen-board sockets re-check."""
    if action not in ("pre_clear", "post_remove", "post_clear"):
        return
    if reverse:  # user.restaurants.remove(...) / clear(): that user
        if action != "pre_clear":
            notify_user(instance.pk, "restaurant staff changed")
        return
    if action == "pre_clear":  # restaurant.staff.clear(): remember who is leaving
        instance._leaving_staff = list(instance.staff.values_list("pk", flat=True))
        return
    users = pk_set if action == "post_remove" else getattr(instance, "_leaving_staff", [])
    for user_id in users or ():
        notify_user(user_id, "restaurant staff changed")


def connect() -> None:
    user_model = get_user_model()
    user_logged_out.connect(_logged_out, dispatch_uid="live-logout")
    post_delete.connect(_token_deleted, sender=ApiToken, dispatch_uid="live-token-deleted")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="live-user-saved")
    post_delete.connect(_user_deleted, sender=user_model, dispatch_uid="live-user-deleted")
    post_init.connect(_order_loaded, sender=Order, dispatch_uid="live-order-loaded")
    post_save.connect(_order_saved, sender=Order, dispatch_uid="live-order-saved")
    post_save.connect(_share_link_saved, sender=ShareLink, dispatch_uid="live-share-saved")
    post_delete.connect(_share_link_deleted, sender=ShareLink, dispatch_uid="live-share-gone")
    m2m_changed.connect(
        _staff_changed, sender=Restaurant.staff.through, dispatch_uid="live-staff-changed"
    )
    for profile in (Customer, Courier):
        name = profile.__name__
        pre_save.connect(_profile_saving, sender=profile, dispatch_uid=f"live-{name}-saving")
        post_delete.connect(_profile_deleted, sender=profile, dispatch_uid=f"live-{name}-gone")

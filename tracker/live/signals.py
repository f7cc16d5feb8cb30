"""Tell open WebSockets to re-check their access when it may have changed.

Authorisation is decided at connect; these receivers make it hold for the whole
life of a socket. On logout (session flushed, token deleted), token expiry,
deactivation or any other change to a user, every socket of that user is asked to
re-check; when an order's customer or courier changes, every socket on that order
is. The message goes through the channel layer after the transaction commits, so
with Redis it reaches every ASGI server within milliseconds. A socket whose check
fails closes with 4401 (credential gone) or 4404 (order no longer yours).

The in-memory channel layer (embedded mode) reaches only this process; sockets
also re-check every ``PUSH_RECHECK_SECONDS`` for what these messages miss.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_init, post_save
from rest_framework.authtoken.models import Token

from tracker.live import messages as m
from tracker.orders.models import Order

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
    if user_id is not None:
        transaction.on_commit(lambda: _send(m.user_group(user_id), reason))


def notify_order(order_id: int, reason: str) -> None:
    transaction.on_commit(lambda: _send(m.order_group(order_id), reason))


def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    notify_user(getattr(user, "pk", None), "logout")


def _token_deleted(sender: Any, instance: Token, **kwargs: Any) -> None:
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
    instance._loaded_parties = after


def connect() -> None:
    user_model = get_user_model()
    user_logged_out.connect(_logged_out, dispatch_uid="live-logout")
    post_delete.connect(_token_deleted, sender=Token, dispatch_uid="live-token-deleted")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="live-user-saved")
    post_delete.connect(_user_deleted, sender=user_model, dispatch_uid="live-user-deleted")
    post_init.connect(_order_loaded, sender=Order, dispatch_uid="live-order-loaded")
    post_save.connect(_order_saved, sender=Order, dispatch_uid="live-order-saved")

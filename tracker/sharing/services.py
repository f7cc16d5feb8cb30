"""Making and revoking shared tracking links: every write to a link goes through here.

The order's row is locked while its links are counted or revoked, so two requests at once
cannot both make the last link allowed. Revoking saves each link, and the live package's
signal receivers (:mod:`tracker.live.signals`) then ask that order's open sockets to check
their access again, which closes a revoked link's sockets within a second.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from tracker.orders import policy
from tracker.orders.models import Order
from tracker.sharing import tokens
from tracker.sharing.models import ShareLink, ends_at


class ShareRefused(Exception):
    """A link cannot be made now: the order has ended, or it has as many links as allowed."""


def _order_for(by: policy.Actor, order_id: int) -> Order:
    """The order, locked for the transaction; NotVisible when ``by`` may not see it."""
    order = policy.visible_orders(by).select_for_update(of=("self",)).filter(pk=order_id).first()
    if order is None:
        raise policy.NotVisible(order_id)
    return order


def create_link(
    order_id: int, *, by: policy.Actor, at: datetime | None = None
) -> tuple[ShareLink, str]:
    """A new link to the order for its customer: ``(link, token)``; the token is not kept,
    so this is the only time anyone sees it.

    NotVisible for an order ``by`` may not see, PermissionDenied for one that is not theirs
    to share, ShareRefused when the link would not work at all (the order ended more than
    ``SHARE_LINK_GRACE`` ago) or the order already has ``SHARE_MAX_LINKS_PER_ORDER`` working
    links."""
    now = at or timezone.now()
    with transaction.atomic():
        order = _order_for(by, order_id)
        if not policy.can_share(by, order):
            raise PermissionDenied("Only the order's customer can share it.")
        expires_at = now + settings.SHARE_LINK_MAX_AGE
        if ends_at(expires_at, order.status, order.status_changed_at) <= now:
            raise ShareRefused(
                f"order {order_id} is {order.status}: there is nothing left to follow"
            )
        limit = settings.SHARE_MAX_LINKS_PER_ORDER
        if ShareLink.objects.live(now).filter(order=order).count() >= limit:
            raise ShareRefused(
                f"order {order_id} already has {limit} working links; stop sharing first"
            )
        token = tokens.new_token()
        link = ShareLink.objects.create(
            order=order,
            token_hash=tokens.digest(token),
            created_by=by,
            created_at=now,
            expires_at=expires_at,
        )
    return link, token


def _revoke(links: list[ShareLink], now: datetime) -> int:
    for link in links:
        link.revoked_at = now
        link.save(update_fields=["revoked_at"])  # announced to open sockets (live.signals)
    return len(links)


def revoke_links(order_id: int, *, by: policy.Actor, at: datetime | None = None) -> int:
    """Revoke every link of the order not revoked yet (its customer, or an operator); how
    many. Their open sockets close within a second. NotVisible and PermissionDenied as
    :func:`create_link`."""
    now = at or timezone.now()
    with transaction.atomic():
        order = _order_for(by, order_id)
        if not policy.can_revoke_shares(by, order):
            raise PermissionDenied("Only the order's customer can stop sharing it.")
        links = list(ShareLink.objects.filter(order=order, revoked_at__isnull=True))
        return _revoke(links, now)


def revoke_link(link_id: int, *, by: policy.Actor, at: datetime | None = None) -> bool:
    """Revoke one link (the admin's action); False when it was revoked already."""
    now = at or timezone.now()
    with transaction.atomic():
        order = _order_for(by, ShareLink.objects.values_list("order_id", flat=True).get(pk=link_id))
        if not policy.can_revoke_shares(by, order):
            raise PermissionDenied("Only the order's customer or an operator can revoke it.")
        link = ShareLink.objects.select_for_update().get(pk=link_id)
        if link.revoked_at is not None:
            return False
        return _revoke([link], now) == 1

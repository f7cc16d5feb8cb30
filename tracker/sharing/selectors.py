"""Reads of shared tracking links: which order a token opens, and an order's live links.

A token that is unknown, malformed, revoked or past its end is answered the same way
(None), at the same cost apart from the malformed ones (no query): whoever holds a link
cannot tell a revoked one from one that never existed.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from tracker.orders.models import Order
from tracker.orders.policy import LinkHolder
from tracker.sharing import tokens
from tracker.sharing.models import ShareLink


def holder_for(token: str) -> LinkHolder | None:
    """Whoever holds ``token``: a :class:`~tracker.orders.policy.LinkHolder` of its order
    while the link works, else None."""
    if not tokens.well_formed(token):
        return None
    return holder_for_digest(tokens.digest(token))


def holder_for_digest(token_hash: str, now: datetime | None = None) -> LinkHolder | None:
    """:func:`holder_for` by the token's digest (an open socket keeps the digest only, and
    asks again for as long as it is open)."""
    now = now or timezone.now()
    link = (
        ShareLink.objects.live(now)
        .select_related("order")
        .only(
            "id",
            "order_id",
            "created_by_id",
            "expires_at",
            "order__status",
            "order__status_changed_at",
        )  # fmt: skip
        .filter(token_hash=token_hash)
        .first()
    )
    if link is None:
        return None
    return LinkHolder(
        order_id=link.order_id,
        link_id=link.pk,
        ends_at=link.ends_at(),
        creator_id=link.created_by_id,
    )


def live_links(order: Order, now: datetime | None = None) -> QuerySet[ShareLink]:
    """The order's links that work now, newest first (their tokens are not kept)."""
    return ShareLink.objects.live(now).filter(order=order).select_related("order")

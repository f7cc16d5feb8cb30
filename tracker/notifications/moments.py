"""The moments a customer is told about, and the one tag/Topic rule every sender shares.

A status change is a moment when :data:`MOMENT_OF_STATUS` names it; "running late" is
decided by the notifier from the arrival predictions (:mod:`tracker.tracking.eta`).

**The tag rule.** Every notification of one order's one moment carries the tag
``order-<order id>-<moment>`` (:func:`tag`), whoever shows it: the service worker for a
Web Push message (the tag is in the payload) and the open order page (``notify.js``, which
reads the rule from the page's configuration, :func:`page_rule`). A browser replaces a
notification that has the tag of one it shows, so a resend, or the open tab's own
notification of the same moment, replaces the first instead of doubling it. Each later
slip of "running late" replaces the earlier one on the lock screen for the same reason.

The Web Push ``Topic`` header (:func:`topic`) is derived from the tag: a push service
holding an undelivered message with the same Topic (a sleeping phone) replaces it, so the
device wakes to one. RFC 8030 allows at most 32 characters of the URL-safe base64
alphabet, and an order id may be 19 digits, so the Topic is the first 32 characters of the
tag's SHA-256 in that alphabet (stable, never longer, never a character it refuses).
"""

from __future__ import annotations

import base64
import hashlib
from enum import StrEnum

from contract.lifecycle import OrderStatus


class Moment(StrEnum):
    CONFIRMED = "confirmed"
    OUT_FOR_DELIVERY = "out_for_delivery"
    AT_DOOR = "at_door"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"
    RUNNING_LATE = "running_late"

    @property
    def label(self) -> str:
        return LABELS[self]


LABELS = {
    Moment.CONFIRMED: "Confirmed",
    Moment.OUT_FOR_DELIVERY: "Out for delivery",
    Moment.AT_DOOR: "At the door",
    Moment.DELIVERED: "Delivered",
    Moment.CANCELLED: "Cancelled",
    Moment.RUNNING_LATE: "Running late",
}

#: What each moment says, wherever it is shown: the pushed payload's title and body
#: (:class:`.payload.LockScreen`, also the email's subject and first line) and the open
#: tab's own notification (``notify.js``, through :func:`page_rule`), so the two that replace
#: each other (one tag) say the same. ``{order_id}`` and ``{window}`` (the arrival window in
#: the customer's time zone, "19:05–19:20") are filled in by :func:`wording`.
WORDING: dict[Moment, tuple[str, str]] = {
    Moment.CONFIRMED: ("Order #{order_id} is confirmed", "The kitchen has it."),
    Moment.OUT_FOR_DELIVERY: ("Order #{order_id} is on its way", "Arriving {window}"),
    Moment.AT_DOOR: ("Order #{order_id} is at your door", "Your courier is here."),
    Moment.DELIVERED: ("Order #{order_id} is delivered", "Enjoy your meal."),
    Moment.CANCELLED: ("Order #{order_id} is cancelled", "Open the order for details."),
    Moment.RUNNING_LATE: ("Order #{order_id} is running late", "Now arriving {window}"),
}


def wording(order_id: int, moment: Moment | str, window: str = "") -> tuple[str, str]:
    """The title and body of the order's moment (:data:`WORDING`); a body that tells the
    window is left empty where none is known (the open tab does not know the one told)."""
    title, body = WORDING[Moment(moment)]
    return title.replace("{order_id}", str(int(order_id))), _body(body, window)


def _body(body: str, window: str) -> str:
    """A body that tells the window is empty where none is known."""
    return "" if "{window}" in body and not window else body.replace("{window}", window)


#: The statuses whose arrival is a moment (the others happen in the kitchen, unannounced).
MOMENT_OF_STATUS: dict[str, Moment] = {
    OrderStatus.ORDER_CONFIRMED.value: Moment.CONFIRMED,
    OrderStatus.OUT_FOR_DELIVERY.value: Moment.OUT_FOR_DELIVERY,
    OrderStatus.ARRIVING_AT_DOOR.value: Moment.AT_DOOR,
    OrderStatus.DELIVERED.value: Moment.DELIVERED,
    OrderStatus.CANCELLED.value: Moment.CANCELLED,
}

#: Milestones go out with ``Urgency: high`` (RFC 8030: delivered even to a phone saving
#: its battery); none of ours is less, but the rule is here, not at the sender.
HIGH_URGENCY = frozenset(Moment)

#: The tag's pattern: the page formats it with the same two names.
TAG_FORMAT = "order-{order_id}-{moment}"
#: RFC 8030, section 5.4: a Topic is at most 32 characters of the URL-safe base64 alphabet.
TOPIC_MAX = 32


def tag(order_id: int, moment: Moment | str) -> str:
    """The notification tag of the order's moment (the module docstring says why)."""
    return TAG_FORMAT.format(order_id=int(order_id), moment=Moment(moment).value)


def topic(order_id: int, moment: Moment | str) -> str:
    """The Web Push ``Topic`` header of the order's moment, derived from its :func:`tag`."""
    digest = hashlib.sha256(tag(order_id, moment).encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")[:TOPIC_MAX]


def page_rule() -> dict[str, object]:
    """What the pages get of this rule (``config.notifications`` in every page's
    configuration): the tag's pattern, which status is which moment and what each says, so
    ``notify.js`` tags and words the open tab's notification exactly as the pushed one."""
    return {
        "tagFormat": TAG_FORMAT,
        "momentOfStatus": {status: moment.value for status, moment in MOMENT_OF_STATUS.items()},
        "moments": {moment.value: moment.label for moment in Moment},
        # the page never knows the window told: its bodies are those without one
        "wording": {m.value: {"title": t, "body": _body(b, "")} for m, (t, b) in WORDING.items()},
    }

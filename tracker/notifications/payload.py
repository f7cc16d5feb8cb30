"""What a pushed notification carries: the lock-screen payload, a declared shape.

A lock screen is seen by anyone near the phone, so the payload says only the order's
number, its status, the moment and the arrival window: no address, no items, no names (of
the customer, the restaurant or the courier). The service worker shows it as it is:

``{"v": 1, "tag": "order-42-out_for_delivery", "moment": "out_for_delivery",
"status": "OUT_FOR_DELIVERY", "order_id": 42, "title": "Order #42 is on its way",
"body": "Arriving 19:05–19:20", "window_start": "2026-12-07T13:35:00Z",
"window_end": "2026-12-07T13:50:00Z", "url": "/orders/42/", "at": "2026-12-07T13:12:09Z"}``

* ``tag``: the notification's tag, :func:`tracker.notifications.moments.tag` (show it with
  ``{tag, renotify: true}``: a resend replaces, never doubles).
* ``window_start`` / ``window_end``: the arrival window told to the customer (UTC, ISO
  8601), null where none is known (confirmed, delivered, cancelled); ``body`` already
  carries it in the customer's time zone (``NOTIFY_TIME_ZONE``).
* ``title`` / ``body``: :data:`tracker.notifications.moments.WORDING`, which the open tab's
  own notification of the moment says too.
* ``url``: the order's page, a path on this site: the notification's click opens it.
* ``at``: when the moment happened (the event's time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from django.conf import settings
from django.urls import reverse
from rest_framework import serializers

from tracker.notifications.moments import Moment, tag, wording

VERSION = 1


@dataclass(frozen=True)
class Window:
    """The arrival window told to the customer (epoch ms)."""

    earliest: int
    latest: int


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def local_time(ms: int) -> str:
    """``19:05`` in the customer's time zone."""
    zone = ZoneInfo(settings.NOTIFY_TIME_ZONE)
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone).strftime("%H:%M")


def window_text(window: Window | None) -> str:
    if window is None:
        return ""
    return f"{local_time(window.earliest)}–{local_time(window.latest)}"


@dataclass(frozen=True)
class LockScreen:
    """The payload (the module docstring shows one); :meth:`to_json` is what is encrypted."""

    v: int
    tag: str
    moment: str
    status: str
    order_id: int
    title: str
    body: str
    window_start: str | None
    window_end: str | None
    url: str
    at: str

    @classmethod
    def of(
        cls, order_id: int, moment: Moment, status: str, at_ms: int, window: Window | None
    ) -> LockScreen:
        title, body = wording(order_id, moment, window_text(window))
        return cls(
            v=VERSION,
            tag=tag(order_id, moment),
            moment=moment.value,
            status=status,
            order_id=order_id,
            title=title,
            body=body,
            window_start=_iso(window.earliest) if window else None,
            window_end=_iso(window.latest) if window else None,
            url=reverse("frontend:order", args=[order_id]),
            at=_iso(at_ms) or "",
        )

    def to_json(self) -> dict[str, object]:
        return LockScreenSerializer(asdict(self)).data


class LockScreenSerializer(serializers.Serializer):
    """The declared shape of a Web Push payload (see the module docstring); nothing beyond
    these fields is ever sent."""

    v = serializers.IntegerField(help_text="The payload's version: 1.")
    tag = serializers.CharField(help_text="The notification tag: `order-<id>-<moment>`.")
    moment = serializers.ChoiceField(choices=[m.value for m in Moment])
    status = serializers.CharField(help_text="The order's status (the event contract's).")
    order_id = serializers.IntegerField(help_text="The order number.")
    title = serializers.CharField()
    body = serializers.CharField(allow_blank=True)
    window_start = serializers.DateTimeField(allow_null=True)
    window_end = serializers.DateTimeField(allow_null=True)
    url = serializers.CharField(help_text="The order's page, a path on this site.")
    at = serializers.DateTimeField(help_text="When the moment happened.")

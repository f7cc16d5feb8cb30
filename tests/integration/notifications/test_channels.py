"""The notifier's channels against real parts: a local push service that verifies VAPID
and decrypts as a browser would (localrun/pushservice.py), and a real SMTP server (aiosmtpd).

The notifier runs in this process (its decisions and dispatcher); its records are the
outbox events the order services wrote, as Kafka would carry them. End to end through Kafka,
with kills: test_notifier_on_kafka.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email
import time
from collections.abc import Iterator

import pytest
from aiosmtpd.controller import Controller

from contract.events import Topic
from localrun.ports import free_port
from localrun.pushservice import PushService
from tests.factories import make_world
from tests.fixtures_pinot import delivery_event
from tests.waiting import wait_until
from tracker.notifications import services, vapid
from tracker.notifications.channels import Email, WebPush
from tracker.notifications.models import Delivery, PushSubscription
from tracker.notifications.moments import Moment, tag, topic
from tracker.notifications.notifier import Dispatcher, Notifier
from tracker.orders.models import Order
from tracker.outbox.models import OutboxEvent

pytestmark = pytest.mark.django_db(transaction=True)

SHAPE = {"v", "tag", "moment", "status", "order_id", "title", "body", "window_start",
         "window_end", "url", "at"}  # fmt: skip


class Mailbox:
    """An aiosmtpd handler keeping every message it accepted."""

    def __init__(self) -> None:
        self.messages: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def notify_settings(settings, tmp_path):
    settings.WEBPUSH_ALLOW_LOCAL = True
    settings.WEBPUSH_VAPID_KEY_FILE = str(tmp_path / "vapid.pem")
    settings.WEBPUSH_VAPID_GENERATE = True
    settings.NOTIFY_RETRY_SECONDS = 0.05
    settings.NOTIFY_SEND_TIMEOUT_SECONDS = 2.0
    vapid.private_key.cache_clear()
    yield settings
    vapid.private_key.cache_clear()


@pytest.fixture
def push_service(notify_settings) -> Iterator[PushService]:
    service = PushService(vapid.public_key()).start()
    yield service
    service.stop()


@pytest.fixture
def mailbox(notify_settings) -> Iterator[Mailbox]:
    box = Mailbox()
    port = free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    notify_settings.EMAIL_HOST, notify_settings.EMAIL_PORT = "127.0.0.1", port
    yield box
    controller.stop()


@pytest.fixture
def notifier(notify_settings) -> Iterator[Notifier]:
    push = WebPush()
    dispatcher = Dispatcher({"push": push, "email": Email()})
    yield Notifier(dispatcher)
    dispatcher.close()
    push.close()


def _subscribe(service: PushService, user, name: str) -> PushSubscription:
    keys = service.browser(name).keys()
    sub, _ = services.register(
        user, endpoint=service.endpoint(name), p256dh=keys["p256dh"], auth=keys["auth"]
    )
    return sub


def _statuses(order: Order) -> list[tuple[Topic, bytes, bytes]]:
    """The order's status events (topic, key, value), as the relay publishes them."""
    rows = OutboxEvent.objects.filter(key=str(order.pk), topic=Topic.ORDER_STATUSES).order_by("id")
    return [(Topic.ORDER_STATUSES, row.key.encode(), bytes(row.payload)) for row in rows]


def test_each_moment_is_pushed_encrypted_signed_and_tagged_once(push_service, notifier):
    world = make_world(orders=("DELIVERED",), couriers=("rider",))
    _subscribe(push_service, world.alice.user, "phone")
    records = _statuses(world.order)
    notifier.handle(records)
    notifier.handle(records)  # Kafka's redelivery: nothing more is shown
    wanted = ["confirmed", "out_for_delivery", "at_door", "delivered"]
    wait_until(lambda: len(push_service.of("phone")) >= 4, 20, "four pushes")
    wait_until(notifier.dispatcher.idle, 20, "the dispatcher done")
    assert push_service.refused == []
    got = push_service.of("phone")
    assert [p["moment"] for p in got] == wanted
    for payload, received in zip(got, push_service.received, strict=True):
        assert set(payload) == SHAPE  # nothing beyond the declared shape
        assert payload["tag"] == tag(world.order.pk, payload["moment"])
        assert payload["url"] == f"/orders/{world.order.pk}/"
        assert received.headers["topic"] == topic(world.order.pk, payload["moment"])
        assert len(received.headers["topic"]) <= 32
        assert int(received.headers["ttl"]) > 0
        assert received.headers["urgency"] == "high"
    out = got[1]
    assert out["window_start"] and out["window_end"] and "Arriving" in out["body"]
    assert "alice" not in str(got) and "Test Pizza" not in str(got) and "Church" not in str(got)
    assert set(Delivery.objects.values_list("state", flat=True)) == {"sent"}


@pytest.mark.parametrize("status", [404, 410])
def test_a_gone_subscription_is_deleted(push_service, notifier, status):
    world = make_world(orders=("ORDER_CONFIRMED",))
    sub = _subscribe(push_service, world.alice.user, "old")
    push_service.answer("old", status)
    notifier.handle(_statuses(world.order))
    wait_until(lambda: not PushSubscription.objects.filter(pk=sub.pk).exists(), 20, "deleted")
    assert Delivery.objects.get().state == "gone"


def test_a_busy_push_service_is_retried_and_shown_once(push_service, notifier):
    world = make_world(orders=("ORDER_CONFIRMED",))
    _subscribe(push_service, world.alice.user, "busy")
    push_service.answer("busy", 429, 503)
    notifier.handle(_statuses(world.order))
    wait_until(lambda: Delivery.objects.get().state == "sent", 20, "sent after the retries")
    assert push_service.requests["busy"] == 3
    assert [p["moment"] for p in push_service.of("busy")] == ["confirmed"]
    assert Delivery.objects.get().attempts == 3


def test_a_push_service_that_never_answers_delays_nobody_else(notify_settings, notifier):
    notify_settings.NOTIFY_PER_DESTINATION = 2
    notify_settings.NOTIFY_MAX_TRIES = 1
    hung = PushService(vapid.public_key()).start()
    healthy = PushService(vapid.public_key(), host="localhost").start()
    try:
        world = make_world(orders=("ORDER_CONFIRMED",), bob=True, other=True)
        for n in range(10):
            _subscribe(hung, world.alice.user, f"hung{n}")
            hung.hung.add(f"hung{n}")
        _subscribe(healthy, world.bob.user, "fine")
        notifier.handle(_statuses(world.order))  # alice's ten first, into the hung service
        from tracker.orders import services as orders
        from tracker.orders.policy import SYSTEM

        orders.advance_order(world.other.pk, by=SYSTEM, to="ORDER_CONFIRMED")
        notifier.handle(_statuses(world.other))
        wait_until(lambda: healthy.of("fine"), 20, "bob's push while alice's service hangs")
        # Two at a time, and as many again twice in its slow lane (NOTIFY_SLOW_SECONDS).
        assert hung.received == [] and sum(hung.requests.values()) <= 3 * 2
        assert not notifier.dispatcher.idle()
    finally:
        hung.stop()
        healthy.stop()
    wait_until(notifier.dispatcher.idle, 60, "the hung sends to time out")
    states = list(Delivery.objects.filter(channel="push").values_list("state", flat=True))
    assert sorted(states) == ["failed"] * 10 + ["sent"]


@contextlib.contextmanager
def _notifier_as_set(push_service: PushService) -> Iterator[Notifier]:
    """A notifier made with the settings as the test set them (its push client's timeout
    among them); the push service is stopped first, so no hung send outlives the test."""
    push = WebPush()
    dispatcher = Dispatcher({"push": push, "email": Email()})
    try:
        yield Notifier(dispatcher)
    finally:
        push_service.stop()
        dispatcher.close()
        push.close()


def test_a_subscription_that_never_answers_delays_nobody_else_on_its_push_service(
    notify_settings, push_service
):
    """One push service, some of its subscriptions hung: their sends leave the host's slots
    after NOTIFY_SLOW_SECONDS, so another customer's push on the same service goes out
    before any hung send has timed out."""
    notify_settings.NOTIFY_PER_DESTINATION = 2
    notify_settings.NOTIFY_SLOW_SECONDS = 0.2
    notify_settings.NOTIFY_SEND_TIMEOUT_SECONDS = 60.0
    notify_settings.NOTIFY_MAX_TRIES = 1
    world = make_world(orders=("ORDER_CONFIRMED",), bob=True, other=True)
    for n in range(4):
        _subscribe(push_service, world.alice.user, f"hung{n}")
        push_service.hung.add(f"hung{n}")
    _subscribe(push_service, world.bob.user, "fine")
    with _notifier_as_set(push_service) as notifier:
        notifier.handle(_statuses(world.order))  # alice's four first: twice the host's slots
        from tracker.orders import services as orders
        from tracker.orders.policy import SYSTEM

        orders.advance_order(world.other.pk, by=SYSTEM, to="ORDER_CONFIRMED")
        notifier.handle(_statuses(world.other))
        wait_until(lambda: push_service.of("fine"), 30, "bob's push while alice's hang")
        assert not Delivery.objects.filter(customer=world.alice, attempts__gt=0).exists()
        assert sorted(push_service.requests) == ["fine", "hung0", "hung1", "hung2", "hung3"]
        assert not notifier.dispatcher.idle()  # alice's four still hang


def test_a_hung_subscriptions_later_sends_are_bounded(notify_settings, push_service):
    """A subscription that was slow and then failed is hung: its sends wait in its host's
    slow lane, which queues as many as it runs; beyond that they fail at once, without a
    request, so hung subscriptions cannot grow the notifier's queue (or memory)."""
    notify_settings.NOTIFY_PER_DESTINATION = 1
    notify_settings.NOTIFY_SLOW_SECONDS = 0.1
    notify_settings.NOTIFY_SEND_TIMEOUT_SECONDS = 0.5
    notify_settings.NOTIFY_MAX_TRIES = 1
    world = make_world(orders=("DELIVERED",) * 4, couriers=("rider",))
    _subscribe(push_service, world.alice.user, "hung")
    push_service.hung.add("hung")
    first, second, third, fourth = world.orders
    rows = Delivery.objects.filter(customer=world.alice)
    with _notifier_as_set(push_service) as notifier:
        notifier.handle(_statuses(first)[:2])  # its confirmation: slow, then timed out
        wait_until(lambda: rows.filter(state="failed").exists(), 30, "the first to time out")
        for order in (second, third, fourth):
            notifier.handle(_statuses(order))  # four moments each
        # The second's first moment runs, the third's waits: the fourth's find no room.
        wait_until(notifier.dispatcher.idle, 60, "every send to end")
    shed = rows.filter(detail__startswith="not answering")
    assert sorted(shed.values_list("order_id", flat=True)) == [fourth.pk] * 4
    assert set(rows.values_list("state", flat=True)) == {"failed"}
    assert push_service.requests["hung"] == 1 + 4 + 4  # the fourth's never reached it


def test_the_notifier_keeps_no_query_log_with_debug_on(notify_settings, push_service, notifier):
    """Debug on (``make run``) logs each query of a connection, 9,000 kept: the notifier's
    long-lived threads clear them as a web request would, or its memory grows with them."""
    from django.db import connection

    notify_settings.DEBUG = True
    world = make_world(orders=("DELIVERED",), couriers=("rider",))
    _subscribe(push_service, world.alice.user, "phone")
    notifier.handle(_statuses(world.order))
    assert connection.queries == []
    wait_until(lambda: len(push_service.of("phone")) == 4, 20, "four pushes")


def test_an_email_is_sent_once_in_the_customers_time_zone(mailbox, notifier):
    world = make_world(orders=("OUT_FOR_DELIVERY",), couriers=("rider",))
    user = world.alice.user
    user.email = "alice@example.com"
    user.save()
    services.change_preferences(world.alice, email_enabled=True, moments=["out_for_delivery"])
    records = _statuses(world.order)
    notifier.handle(records)
    notifier.handle(records)
    wait_until(notifier.dispatcher.idle, 20, "the dispatcher done")
    (message,) = mailbox.messages
    assert message["To"] == "alice@example.com"
    assert message["Subject"] == f"Order #{world.order.pk} is on its way"
    unsubscribe = "".join(message["List-Unsubscribe"].split())  # a long header is folded
    assert unsubscribe.startswith("<http://127.0.0.1:8000/api/v1/notifications/unsubscribe/")
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert message["Date"].endswith("+0530")  # Bengaluru
    body = message.get_payload()
    assert "Asia/Kolkata" in body and "/settings/notifications/" in body
    assert Delivery.objects.get().state == "sent"


def test_an_email_a_crash_left_sending_is_counted_unknown_never_resent(
    mailbox, notifier, notify_settings
):
    from django.utils import timezone

    notify_settings.NOTIFY_SENDING_LEASE_SECONDS = 0.0
    world = make_world(orders=("ORDER_CONFIRMED",))
    user = world.alice.user
    user.email = "alice@example.com"
    user.save()
    services.change_preferences(world.alice, email_enabled=True)
    Delivery.objects.create(  # as a notifier killed inside the SMTP conversation left it
        order_id=world.order.pk, moment=Moment.CONFIRMED, channel="email",
        target=__import__("hashlib").sha256(b"alice@example.com").hexdigest(),
        customer=world.alice, state="sending", decided_from=timezone.now(),
    )  # fmt: skip
    notifier.handle(_statuses(world.order))  # the record again, after the restart
    assert notifier.sweep() == 0
    wait_until(notifier.dispatcher.idle, 20, "the dispatcher done")
    assert Delivery.objects.get().state == "unknown"
    assert mailbox.messages == []


def test_an_orders_points_are_checked_for_running_late_once_an_interval(
    notify_settings, push_service
):
    """A courier sends a point a second and a slip is minutes: the notifier checks an order
    at most every NOTIFY_LATE_CHECK_SECONDS and skips its other points unread."""
    notify_settings.NOTIFY_LATE_CHECK_SECONDS = 2.0
    push = WebPush()
    dispatcher = Dispatcher({"push": push, "email": Email()})
    notifier = Notifier(dispatcher)
    world = make_world(orders=("OUT_FOR_DELIVERY",), couriers=("rider",))
    _subscribe(push_service, world.alice.user, "phone")
    notifier.handle(_statuses(world.order))  # out for delivery: the window is told
    order = world.order

    def point(version: int, km_off: float) -> tuple[Topic, bytes, bytes]:
        event = dataclasses.replace(
            delivery_event(order.pk, version, order.delivery_lat + km_off / 111, order.delivery_lon,
                           courier_id=world.couriers[0].pk, restaurant_id=world.restaurant.pk),
            customer_id=order.customer_id, distance_left_km=max(km_off, 0.1),
            destination_lat=order.delivery_lat, destination_lon=order.delivery_lon,
        )  # fmt: skip
        return (Topic.DELIVERY_STATUSES, event.key(), event.to_json())

    late = Delivery.objects.filter(moment=Moment.RUNNING_LATE)
    try:
        # At the door, then 40 km off (a wrong turn) within the interval: that one is unread.
        notifier.handle([point(10, 0.0), point(11, 40.0)])
        assert not late.exists()
        time.sleep(2.1)
        notifier.handle([point(12, 40.0), point(13, 40.0)])
        assert late.count() == 1
        wait_until(lambda: len(push_service.of("phone")) == 3, 20, "three pushes")
        assert [p["moment"] for p in push_service.of("phone")][-1] == "running_late"
    finally:
        dispatcher.close()
        push.close()

"""Live push over WebSocket: authorised like REST, snapshot then every change, no gap.

The tracking store is the local Pinot server fed through the real broker; the
bridge consumes the real orders_enriched topic. (The full pipeline, with the
Spark job turning API writes into these records, is in test_pipeline_e2e.py.)
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from contract.events import (
    DeliveryLocation,
    OrderStatusChanged,
    Topic,
    new_event_id,
    now_ms,
    topic_name,
)
from tests.factories import amake_world, make_courier, make_customer, make_restaurant
from tests.fixtures_pinot import order_event, order_event_of
from tracker.accounts.services import issue_token
from tracker.live import bridge as bridge_module
from tracker.live import messages
from tracker.live.bridge import Bridge
from tracker.live.layers import SweepingInMemoryChannelLayer
from tracker.orders import services
from tracker.orders.policy import SYSTEM
from tracker.outbox.relay import Relay

pytestmark = pytest.mark.django_db(transaction=True)

#: Alice's order, a courier, bob; their tokens.
WORLD = {"couriers": ("rider",), "bob": True, "tokens": True}


def _socket(path: str, token: str | None) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Token {token}".encode())] if token else []
    return WebsocketCommunicator(application, path, headers=headers)


async def _connect(path: str, token: str | None) -> tuple[WebsocketCommunicator, dict]:
    socket = _socket(path, token)
    connected, _ = await socket.connect(timeout=20)
    assert connected
    return socket, await socket.receive_json_from(timeout=20)


@pytest.mark.asyncio
async def test_anonymous_and_foreign_sockets_are_refused_with_documented_codes(
    pinot, asgi_lifespan
):
    world = await amake_world(**WORLD)
    socket, message = await _connect(f"/ws/orders/{world.order.pk}/", None)
    assert message["type"] == "error" and message["code"] == messages.CLOSE_UNAUTHENTICATED
    assert (await socket.receive_output(timeout=5))["code"] == messages.CLOSE_UNAUTHENTICATED
    socket, message = await _connect(f"/ws/orders/{world.order.pk}/", world.tokens["bob"])
    assert message["code"] == messages.CLOSE_NOT_FOUND
    socket, message = await _connect("/ws/orders/999999/", world.tokens["alice"])
    assert message["code"] == messages.CLOSE_NOT_FOUND


@pytest.mark.asyncio
async def test_snapshot_then_every_change_and_nothing_for_other_customers(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    order = world.order
    t0 = now_ms() - 30_000
    await pinot.apublish(order_event_of(order, 1, created_at=t0))

    mine, snapshot = await _connect(f"/ws/orders/{order.pk}/", world.tokens["alice"])
    assert snapshot["type"] == "snapshot" and snapshot["version"] == 1
    assert snapshot["order"]["status"] == "PLACED_ORDER"
    assert snapshot["order"]["tracking"]["source"] == "pinot"
    assert snapshot["order"]["eta"]["basis"]["kitchen"] == "default"  # no history yet
    my_list, list_snapshot = await _connect("/ws/orders/", world.tokens["alice"])
    assert [o["id"] for o in list_snapshot["orders"]] == [order.pk]
    assert list_snapshot["orders"][0]["eta"]["arrives_at"]
    bobs_list, bobs_snapshot = await _connect("/ws/orders/", world.tokens["bob"])
    assert bobs_snapshot == {"type": "snapshot", "orders": []}

    await pinot.apublish(
        order_event_of(order, 2, "ORDER_CONFIRMED", created_at=t0, status_time=t0 + 5_000),
        order_event_of(order, 3, "ORDER_CONFIRMED", created_at=t0, status_time=t0 + 5_000,
                       courier=(1, 12.97, 77.6, t0 + 6_000)),
    )  # fmt: skip
    update = await mine.receive_json_from(timeout=10)
    assert (update["type"], update["kind"], update["version"], update["status"]) == (
        "update",
        "status",
        2,
        "ORDER_CONFIRMED",
    )
    assert set(update["status_times"]) == {"PLACED_ORDER", "ORDER_CONFIRMED"}
    # the arrival moves with the order: one kitchen step fewer ahead than at the snapshot
    arrival, placed = update["eta"], snapshot["order"]["eta"]
    assert arrival["computed_at"] > placed["computed_at"]
    assert arrival["latest"] < placed["latest"] and arrival["earliest"] < arrival["arrives_at"]
    position = await mine.receive_json_from(timeout=10)
    assert (position["kind"], position["version"], position["position"]["lat"]) == (
        "position",
        3,
        12.97,
    )
    listed = await my_list.receive_json_from(timeout=10)
    assert listed["order_id"] == order.pk and listed["version"] == 2
    assert await bobs_list.receive_nothing(timeout=1)
    for socket in (mine, my_list, bobs_list):
        await socket.disconnect()


@pytest.mark.asyncio
async def test_reconnect_with_a_version_resumes_or_gets_a_fresh_snapshot(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    order = world.order
    t0 = now_ms() - 30_000
    await pinot.apublish(
        order_event_of(order, 1, created_at=t0),
        order_event_of(order, 2, "ORDER_CONFIRMED", created_at=t0, status_time=t0 + 1000),
    )
    socket, message = await _connect(f"/ws/orders/{order.pk}/?since=2", world.tokens["alice"])
    assert message == {"type": "resumed", "order_id": order.pk, "version": 2}
    await socket.disconnect()
    # It missed version 2 while away: a fresh snapshot has everything.
    socket, message = await _connect(f"/ws/orders/{order.pk}/?since=1", world.tokens["alice"])
    assert message["type"] == "snapshot" and message["version"] == 2
    assert [s["state"] for s in message["order"]["timeline"][:3]] == ["done", "current", "pending"]
    await socket.disconnect()
    socket, message = await _connect(f"/ws/orders/{order.pk}/?since=abc", world.tokens["alice"])
    assert message["code"] == messages.CLOSE_BAD_REQUEST


@pytest.mark.asyncio
async def test_ping_gets_pong(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    await pinot.apublish(order_event_of(world.order, 1))
    socket, _ = await _connect(f"/ws/orders/{world.order.pk}/", world.tokens["alice"])
    await socket.send_json_to({"type": "ping"})
    assert (await socket.receive_json_from(timeout=5))["type"] == "pong"
    await socket.disconnect()


def test_bridge_coalesces_positions_but_never_drops_a_status_or_goes_backwards():
    sent = []
    bridge = Bridge(
        lambda sends: sent.extend((group, m["version"], m["kind"]) for group, m in sends)
    )

    class InTransit:
        pk, customer_id, restaurant_id = 5, 9, 1

    def record(version, status="OUT_FOR_DELIVERY", lat=12.9):
        event = order_event_of(InTransit, version, status, courier=(1, lat, 77.6, now_ms()))
        return Topic.ORDERS_ENRICHED, event.to_json()

    bridge.handle(
        [record(1), record(2, lat=12.91), record(3, lat=12.92), record(4, lat=12.93)], fleet=True
    )
    # v1 is a status (first seen); positions v2..v4 coalesce to v4; the order's, customer's
    # and restaurant's groups get each, the operators' group only the status changes.
    assert sent == [
        ("order.5", 1, "status"),
        ("customer.9", 1, "status"),
        ("restaurant.1", 1, "status"),
        ("operations", 1, "status"),
        ("order.5", 4, "position"),
        ("customer.9", 4, "position"),
        ("restaurant.1", 4, "position"),
    ]
    sent.clear()
    bridge.handle(
        [
            record(5, lat=12.94),
            record(6, "ARRIVING_AT_DOOR"),
            record(4),
            record(6, "ARRIVING_AT_DOOR"),
        ],
        fleet=True,
    )
    # The position before a status is superseded by it; repeats and older versions vanish.
    assert sent == [
        ("order.5", 6, "status"),
        ("customer.9", 6, "status"),
        ("restaurant.1", 6, "status"),
        ("operations", 6, "status"),
    ]
    assert bridge.coalesced == 3


def test_bridge_in_process_builds_messages_only_for_groups_someone_listens_to():
    """Embedded, the bridge sees its channel layer's groups: an update goes to the groups
    with a member (and is not built when none has one), a courier's point or an enriched
    record that no group with a member would get is not even parsed, and the fleet waits
    for an operator."""
    sent, kinds, listening = [], [], {"customer.9"}

    def publish(sends):
        sent.extend((group, m["type"]) for group, m in sends)
        kinds.extend(m.get("kind") for _, m in sends)

    bridge = Bridge(publish, listening=listening.__contains__)

    class InTransit:
        pk, customer_id, restaurant_id = 5, 9, 1

    def record(version, order=InTransit, status="OUT_FOR_DELIVERY", lat=12.9):
        event = order_event_of(order, version, status, courier=(7, lat, 77.6, now_ms()))
        return Topic.ORDERS_ENRICHED, event.to_json()

    class Unwatched:
        pk, customer_id, restaurant_id = 6, 10, 2

    class Elsewhere:
        pk, customer_id, restaurant_id = 8, 11, 3

    bridge.handle([record(1), record(1, Unwatched), record(2, Unwatched, lat=12.91)], fleet=True)
    assert sent == [("customer.9", "update")]
    enriched = topic_name(Topic.ORDERS_ENRICHED)
    assert bridge.worth_parsing(enriched, b"5", record(2)[1])  # its customer listens
    # Nobody would get these: not parsed, but their versions and statuses are remembered.
    assert not bridge.worth_parsing(enriched, b"6", record(3, Unwatched)[1])
    assert not bridge.worth_parsing(enriched, b"6", record(4, Unwatched, lat=12.92)[1])
    assert bridge.worth_parsing(enriched, b"6", b"\xff not JSON")  # parsed, and refused
    listening.add("restaurant.2")
    assert bridge.worth_parsing(enriched, b"6", record(5, Unwatched)[1])  # its kitchen board
    listening.remove("restaurant.2")
    # Once watched, the versions seen stay no-ops and the next one is a move, not a
    # status change announced again.
    listening.add("order.6")
    sent.clear()
    bridge.handle(
        [record(3, Unwatched), record(4, Unwatched), record(5, Unwatched, lat=12.93)], fleet=True
    )
    assert sent == [("order.6", "update")]
    assert kinds[-1] == "position"

    locations = topic_name(Topic.DELIVERY_LOCATIONS)
    assert bridge.worth_parsing(locations, b"6") and not bridge.worth_parsing(locations, b"5")
    assert bridge.worth_parsing(locations, b"not an id")  # parsed, and refused by its value
    assert bridge.worth_parsing(enriched, b"6", record(6, Unwatched)[1])  # its order's socket
    point = DeliveryLocation(
        event_id=new_event_id(), event_time=now_ms(), order_id=6, placed_at=now_ms() - 1000,
        courier_id=7, lat=12.93, lon=77.6,
    )  # fmt: skip
    sent.clear()
    bridge.handle([(Topic.DELIVERY_LOCATIONS, point.to_json())], fleet=True)
    assert sent == [("order.6", "position")]  # no fleet message: no operator listens
    listening.add("operations")
    assert bridge.worth_parsing(locations, b"5")  # the fleet wants every courier
    assert bridge.worth_parsing(enriched, b"8", record(1, Elsewhere)[1])  # and every ride
    sent.clear()
    later = dataclasses.replace(point, event_id=new_event_id(), event_time=now_ms() + 1)
    bridge.handle([(Topic.DELIVERY_LOCATIONS, later.to_json())], fleet=True)
    assert sent == [("order.6", "position"), ("operations", "fleet")]


def test_bridge_sends_each_status_once_whichever_path_brings_it_first():
    sent = []
    bridge = Bridge(
        lambda sends: sent.extend((group, m["type"], m["status"]) for group, m in sends)
    )

    def status(status, previous, **parties):
        event = OrderStatusChanged(
            event_id=new_event_id(), event_time=now_ms(), order_id=5, placed_at=now_ms() - 60_000,
            status=status, previous_status=previous, **parties,
        )  # fmt: skip
        return Topic.ORDER_STATUSES, event.to_json()

    def enriched(version, status):
        event = order_event(5, version, status, customer_id=9, restaurant_id=1)
        return Topic.ORDERS_ENRICHED, event.to_json()

    confirmed = status("ORDER_CONFIRMED", "PLACED_ORDER", customer_id=9, restaurant_id=1)
    bridge.handle([status("PLACED_ORDER", None), confirmed, confirmed], fleet=True)
    # A placement is no news (no client shows less); the repeat is dropped; the operators'
    # group waits for the enriched record (its figures come from Pinot).
    assert sent == [
        ("order.5", "status", "ORDER_CONFIRMED"),
        ("customer.9", "status", "ORDER_CONFIRMED"),
        ("restaurant.1", "status", "ORDER_CONFIRMED"),
    ]
    sent.clear()
    # The full state still follows, older status included; then the stream job is quicker
    # for the next status, and its raw event, arriving late, is not sent again.
    bridge.handle(
        [enriched(1, "PLACED_ORDER"), enriched(2, "ORDER_CONFIRMED"), enriched(3, "BEING_PREPARED"),
         status("BEING_PREPARED", "ORDER_CONFIRMED", customer_id=9, restaurant_id=1)], fleet=True
    )  # fmt: skip
    assert [(g, t, s) for g, t, s in sent if g == "order.5"] == [
        ("order.5", "update", "PLACED_ORDER"),
        ("order.5", "update", "ORDER_CONFIRMED"),
        ("order.5", "update", "BEING_PREPARED"),
    ]
    sent.clear()
    # An event from before the parties were in the contract reaches the order's group only.
    bridge.handle([status("BEING_COOKED", "BEING_PREPARED")], fleet=True)
    assert sent == [("order.5", "status", "BEING_COOKED")]


@database_sync_to_async
def _advance_and_relay(order, steps: int = 1) -> None:
    """Change the order as the API does, then run the outbox relay (nothing else runs: no
    stream job writes orders_enriched in these tests)."""
    for _ in range(steps):
        services.advance_order(order.pk, by=SYSTEM)
    relay = Relay()
    while relay.publish_batch():
        pass


@pytest.mark.asyncio
async def test_a_status_change_reaches_its_sockets_without_the_stream_job(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    order = world.order
    await pinot.apublish(order_event_of(order, 1))
    mine, _ = await _connect(f"/ws/orders/{order.pk}/", world.tokens["alice"])
    my_list, _ = await _connect("/ws/orders/", world.tokens["alice"])
    bobs_list, _ = await _connect("/ws/orders/", world.tokens["bob"])

    await _advance_and_relay(order)
    for socket in (mine, my_list):
        message = await socket.receive_json_from(timeout=10)
        assert message.pop("status_time").endswith("Z")
        assert message == {
            "type": "status",
            "order_id": order.pk,
            "customer_id": world.alice.pk,
            "restaurant_id": order.restaurant_id,
            "status": "ORDER_CONFIRMED",
            "status_label": "Order confirmed",
            "previous_status": "PLACED_ORDER",
        }
    assert await bobs_list.receive_nothing(timeout=1)
    for socket in (mine, my_list, bobs_list):
        await socket.disconnect()


@pytest.mark.asyncio
async def test_a_replayed_status_event_is_not_pushed_twice(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    order = world.order
    await pinot.apublish(order_event_of(order, 1))
    mine, _ = await _connect(f"/ws/orders/{order.pk}/", world.tokens["alice"])
    await _advance_and_relay(order, steps=2)
    statuses = [(await mine.receive_json_from(timeout=10))["status"] for _ in range(2)]
    assert statuses == ["ORDER_CONFIRMED", "BEING_PREPARED"]

    # The relay sends the whole outbox again (as after a broker lost its data): the same
    # events, same ids, reach the bridge a second time and no socket hears of them.
    replayed = await database_sync_to_async(Relay().replay)(None)
    assert replayed == 4  # the order, its placement and the two changes
    await _advance_and_relay(order, steps=0)
    await _advance_and_relay(order)  # a real change after the replay still gets through
    message = await mine.receive_json_from(timeout=10)
    assert (message["type"], message["status"]) == ("status", "BEING_COOKED")
    assert await mine.receive_nothing(timeout=1)
    await mine.disconnect()


@database_sync_to_async
def _role_tokens(order):
    from django.contrib.auth import get_user_model

    from tracker.orders import services
    from tracker.orders.models import Order

    users = get_user_model().objects
    rider, other_rider = make_courier("matrix-rider"), make_courier("matrix-rider2")
    for _ in range(3):
        services.advance_order(order.pk, by=SYSTEM)
    services.advance_order(order.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=rider)
    order = Order.objects.select_related("restaurant").get(pk=order.pk)
    chef, other_chef = users.create_user("matrix-chef"), users.create_user("matrix-chef2")
    order.restaurant.staff.add(chef)
    make_restaurant("Elsewhere").staff.add(other_chef)
    operator = users.create_user("matrix-ops", is_staff=True)
    bob = make_customer("matrix-bob")
    people = {
        "owner": order.customer.user, "other_customer": bob.user, "courier": rider.user,
        "other_courier": other_rider.user, "staff": chef, "other_staff": other_chef, "operator": operator,
    }  # fmt: skip
    return {role: issue_token(user).key for role, user in people.items()}


WS_MATRIX = {
    # role: (/ws/orders/<id>/, /ws/orders/)
    "anonymous": (messages.CLOSE_UNAUTHENTICATED, messages.CLOSE_UNAUTHENTICATED),
    "owner": ("snapshot", "snapshot"),
    "other_customer": (messages.CLOSE_NOT_FOUND, "snapshot"),
    "courier": ("snapshot", messages.CLOSE_NOT_FOUND),
    "other_courier": (messages.CLOSE_NOT_FOUND, messages.CLOSE_NOT_FOUND),
    "staff": ("snapshot", messages.CLOSE_NOT_FOUND),
    "other_staff": (messages.CLOSE_NOT_FOUND, messages.CLOSE_NOT_FOUND),
    "operator": ("snapshot", messages.CLOSE_NOT_FOUND),
}


@pytest.mark.asyncio
async def test_websocket_routes_against_every_role(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    order = world.order
    await pinot.apublish(order_event_of(order, 1))
    tokens = {"anonymous": None, **(await _role_tokens(order))}
    for role, expected in WS_MATRIX.items():
        for path, want in zip((f"/ws/orders/{order.pk}/", "/ws/orders/"), expected, strict=True):
            socket, first = await _connect(path, tokens[role])
            got = first["type"] if first["type"] == "snapshot" else first["code"]
            assert got == want, (role, path, first)
            await socket.disconnect()


@pytest.mark.asyncio
async def test_foreign_origin_is_refused_but_apps_without_origin_are_not(pinot, asgi_lifespan):
    world = await amake_world(**WORLD)
    await pinot.apublish(order_event_of(world.order, 1))
    path = f"/ws/orders/{world.order.pk}/"
    token = f"Token {world.tokens['alice']}".encode()

    def from_origin(origin: bytes) -> WebsocketCommunicator:
        headers = [(b"origin", origin), (b"authorization", token)]
        return WebsocketCommunicator(application, path, headers=headers)

    connected, code = await from_origin(b"https://evil.example").connect(timeout=10)
    assert not connected and code == 4403
    ours = from_origin(b"http://127.0.0.1:8000")
    assert (await ours.connect(timeout=20))[0]
    assert (await ours.receive_json_from(timeout=20))["type"] == "snapshot"
    await ours.disconnect()


@pytest.mark.asyncio
async def test_channel_layer_expires_undelivered_messages_with_at_most_one_sweep_a_second():
    layer = SweepingInMemoryChannelLayer(expiry=-1)  # every message is expired at once
    gone, kept = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("order.1", gone)
    await layer.group_add("order.2", kept)
    await layer.send(gone, {"type": "order.update"})
    await layer.group_send("order.3", {"type": "order.update"})  # sweeps
    # A channel whose message expired undelivered leaves its groups, as in Channels.
    assert gone not in layer.groups["order.1"]
    await layer.send(kept, {"type": "order.update"})
    await layer.group_send("order.3", {"type": "order.update"})  # within the second: no sweep
    assert kept in layer.groups["order.2"]


def test_bridge_skips_and_counts_what_it_cannot_take_and_sends_the_rest_of_the_poll():
    sent = []
    bridge = Bridge(lambda sends: sent.extend((group, m["status"]) for group, m in sends))
    ahead = OrderStatusChanged(
        event_id=new_event_id(), event_time=now_ms(), order_id=5,
        placed_at=now_ms() + 30 * 86_400_000, status="ORDER_CONFIRMED",
        previous_status="PLACED_ORDER",
    )  # fmt: skip
    fine = order_event(5, 1, "ORDER_CONFIRMED", customer_id=9, restaurant_id=1)
    bridge.handle(
        [
            (Topic.ORDER_STATUSES, b"\xff\xfe random bytes"),
            (Topic.ORDER_STATUSES, ahead.to_json()),
            (Topic.ORDERS_ENRICHED, b'{"schema_version": 1}'),
            (Topic.ORDERS_ENRICHED, fine.to_json()),
        ],
        fleet=True,
    )
    assert ("order.5", "ORDER_CONFIRMED") in sent
    assert bridge.skipped == {"invalid value": 1, "invalid placed_at": 1, "invalid event_id": 1}


@pytest.mark.parametrize("slow_in", ["publish", "parse"])
def test_a_status_is_published_while_another_reader_is_slow(slow_in, monkeypatch):
    """Each reader parses its poll before taking the bridge's lock and publishes after
    releasing it: neither a long poll being parsed (up to a thousand enriched records)
    nor sends stuck on a busy event loop hold back another reader's status."""
    stuck, release = threading.Event(), threading.Event()
    sent = []

    def hold() -> None:
        stuck.set()
        release.wait(10)

    if slow_in == "parse":
        parse = bridge_module.parse_event

        def slow_parse(topic, value):
            if topic == Topic.ORDERS_ENRICHED:
                hold()
            return parse(topic, value)

        monkeypatch.setattr(bridge_module, "parse_event", slow_parse)

    def publish(sends):
        if slow_in == "publish" and any(message["type"] == "update" for _, message in sends):
            hold()
        sent.extend((group, message["type"]) for group, message in sends)

    bridge = Bridge(publish)
    enriched = order_event(6, 1, "ORDER_CONFIRMED", customer_id=9, restaurant_id=1)
    slow = threading.Thread(
        target=bridge.handle,
        args=([(Topic.ORDERS_ENRICHED, enriched.to_json())],),
        kwargs={"fleet": False},
    )
    slow.start()
    try:
        assert stuck.wait(10)
        status = OrderStatusChanged(
            event_id=new_event_id(), event_time=now_ms(), order_id=5,
            placed_at=now_ms() - 60_000, status="BEING_PREPARED",
            previous_status="ORDER_CONFIRMED",
        )  # fmt: skip
        quick = threading.Thread(
            target=bridge.handle,
            args=([(Topic.ORDER_STATUSES, status.to_json())],),
            kwargs={"fleet": False},
        )
        quick.start()
        quick.join(5)
        assert not quick.is_alive()
        assert sent == [("order.5", "status")]
    finally:
        release.set()
        slow.join(10)
    assert ("order.6", "update") in sent

"""Tracking reads through a database outage (issue 69, the fault drill): users and orders
read lately keep answering from Pinot while the database cannot be reached, with what
:mod:`tracker.cache.outage` kept, for at most its bound past the outage's start; every
revocation drops what was kept; anyone else gets the 503 of test_api_unavailable.py.

The outage is ``database_outage`` (PostgreSQL only: the second run of ``make test``),
with the notice listener's own connection lost too, as when the server stops.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from contract.events import OrderStatus, now_ms
from tests.factories import World, make_world
from tests.fixtures_pinot import order_event_of
from tests.waiting import wait_until
from tracker.accounts.models import ApiToken
from tracker.cache import outage
from tracker.notices import listener
from tracker.notices.services import announce
from tracker.sharing import services as sharing

pytestmark = pytest.mark.django_db(transaction=True)

READERS = ("alice", "rider", "cook")


@pytest.fixture
def world(pinot) -> World:
    """Alice's order on its way with the courier ``rider``, in Pinot; the cook of its
    restaurant; bob, who reads nothing before the outage; a token each."""
    world = make_world(
        orders=(OrderStatus.OUT_FOR_DELIVERY,), couriers=("rider", "rider2"), cooks=True,
        bob=True, tokens=True,
    )  # fmt: skip
    order, rider = world.order, world.couriers[0]
    pinot.publish(
        order_event_of(order, 6, "OUT_FOR_DELIVERY", courier=(rider.pk, 12.96, 77.63, now_ms()))
    )
    pinot.sync()
    return world


def client(world: World, name: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {world.tokens[name]}")
    return api


def reads(world: World, name: str) -> tuple[int, int]:
    """(the order's detail, my orders): the statuses ``name`` is answered."""
    api = client(world, name)
    return (
        api.get(f"/api/v1/orders/{world.order.pk}/").status_code,
        api.get("/api/v1/orders/").status_code,
    )


def read_lately(world: World, *names: str) -> None:
    """Each of ``names`` reads the order and their list while the database answers and
    the notice listener reads (it vouches for what a process keeps; a web process starts
    it at its first read, and keeps nothing read before the listener's first read)."""
    wait_until(listener.healthy, 30, "the notice listener reading")
    for name in names:
        assert reads(world, name) == (200, 200)


#: Markers the listener has handled (:func:`notices_heard`), and the next one.
_HEARD: set[int] = set()
_MARKERS = itertools.count(1)
_MARKER_TOPIC = "test.heard"


def notices_heard() -> None:
    """Until the notice listener has handled every notice written so far: a marker is
    written after them, and notices are handled in the order they were written."""
    marker = next(_MARKERS)
    if marker == 1:  # once a session: handlers stay subscribed
        listener.subscribe(_MARKER_TOPIC, _HEARD.add)
    announce(_MARKER_TOPIC, marker)
    wait_until(lambda: marker in _HEARD, 30, "the notice listener handling the notices")


def test_users_who_read_lately_keep_reading_through_a_database_outage(world, database_outage):
    read_lately(world, *READERS)
    database_outage.start()
    for name in READERS:
        assert reads(world, name) == (200, 200), name
    body = client(world, "alice").get(f"/api/v1/orders/{world.order.pk}/").json()
    assert body["status"] == "OUT_FOR_DELIVERY" and body["tracking"]["source"] == "pinot"
    # Nobody else gets in: bob never read, and alice's order is still not his.
    assert reads(world, "bob") == (503, 503)
    database_outage.end()
    assert client(world, "bob").get(f"/api/v1/orders/{world.order.pk}/").status_code == 404


def test_what_was_kept_is_not_used_past_the_outage_bound(world, database_outage, monkeypatch):
    read_lately(world, "alice")
    database_outage.start()
    assert reads(world, "alice") == (200, 200)
    monkeypatch.setattr(outage, "OUTAGE_SECONDS", 2.0)  # instead of waiting a minute
    wait_until(lambda: reads(world, "alice") == (503, 503), 30, "the kept answers unused")
    database_outage.end()
    assert reads(world, "alice") == (200, 200)


def _password_changed(world: World) -> None:
    user = world.couriers[0].user
    user.set_password("pw-new")
    user.save()


def _token_revoked(world: World) -> None:
    ApiToken.objects.filter(user=world.couriers[0].user).delete()


def _deactivated(world: World) -> None:
    user = world.couriers[0].user
    user.is_active = False
    user.save()


def _reassigned(world: World) -> None:
    """The admin gives the order to another courier."""
    order = world.order
    order.courier = world.couriers[1]
    order.save()


def _staff_removed(world: World) -> None:
    world.restaurant.staff.remove(get_user_model().objects.get(username="cook"))


REVOCATIONS: dict[str, tuple[str, Callable[[World], None]]] = {
    "password change": ("rider", _password_changed),
    "token revoked": ("rider", _token_revoked),
    "deactivation": ("rider", _deactivated),
    "courier reassignment": ("rider", _reassigned),
    "staff removed": ("cook", _staff_removed),
}


@pytest.mark.parametrize("revocation", list(REVOCATIONS))
def test_a_revocation_drops_what_was_kept_for_the_outage(world, database_outage, revocation):
    name, revoke = REVOCATIONS[revocation]
    read_lately(world, name, "alice")
    revoke(world)
    notices_heard()  # a user's save drops their courier name too (here and by notice)
    assert reads(world, "alice") == (200, 200)  # ... which this reads again
    database_outage.start()
    detail, _ = reads(world, name)
    assert detail == 503  # neither the order nor a 401 from a sign-in kept before
    assert reads(world, "alice") == (200, 200)  # what others were answered stays


def test_a_revoked_shared_link_drops_its_orders_kept_answers(world, database_outage):
    """Access revoked on the order (its links) drops every answer about it, as the
    socket re-checks do: the courier's is read again, from the database."""
    read_lately(world, "rider")
    sharing.create_link(world.order.pk, by=world.alice.user)
    sharing.revoke_links(world.order.pk, by=world.alice.user)
    database_outage.start()
    assert reads(world, "rider")[0] == 503


@pytest.mark.asyncio
async def test_a_socket_of_a_user_who_read_lately_opens_through_a_database_outage(
    world, database_outage
):
    from config.asgi import application

    await database_sync_to_async(read_lately)(world, "alice")
    await database_sync_to_async(database_outage.start)()  # the sockets' database thread
    socket = WebsocketCommunicator(
        application,
        f"/ws/orders/{world.order.pk}/",
        headers=[(b"authorization", f"Token {world.tokens['alice']}".encode())],
    )
    assert (await socket.connect(timeout=10))[0]
    snapshot = await socket.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot" and snapshot["order"]["status"] == "OUT_FOR_DELIVERY"
    await socket.disconnect()
    await database_sync_to_async(database_outage.end)()

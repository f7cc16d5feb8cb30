"""An order's detail is never served stale: every way it can change changes its ETag.

The validators are computed before the answer is built (tracker/tracking/read_model.py
``detail_source``): from the version register, the cache and the clock. So each way the
detail can change is made here, and the next read, in this process and in another one,
must carry a new ETag and the new body, or 404 where access went; a matching
``If-None-Match`` from someone who may not see the order is a 404, never a 304.

"Another process" is another thread with none of this process's in-process cache (the
maps of tracker/cache are swapped for empty ones while it reads) and its own cache
clients (Django's are per thread): on the PostgreSQL + Redis pass it shares only Redis
and the database with this one, as a second web worker does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import connections
from rest_framework.test import APIClient

from contract.events import now_ms
from tests.factories import make_courier, make_customer, make_restaurant, out_for_delivery, place
from tests.fixtures_pinot import delivery_event, order_event
from tests.waiting import wait_until
from tracker.accounts.services import issue_token
from tracker.cache import bodies, reads
from tracker.cache.maps import bounded
from tracker.live.bridge import Bridge
from tracker.live.embedded import stop_embedded_bridge
from tracker.live.reader import run_readers
from tracker.orders.models import Order
from tracker.tracking import eta, read_model, selectors

pytestmark = pytest.mark.django_db(transaction=True)  # other threads read what it writes

MIN = 60_000


@pytest.fixture
def bridge(pinot) -> Iterator[None]:
    """A live push bridge run registering versions, as the web workers (or pushbridge) run it."""
    stop_embedded_bridge()
    caches["versions"].clear()
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=run_readers, args=(Bridge(lambda sends: None), stop, ready), daemon=True
    )
    thread.start()
    assert ready.wait(30), "the bridge did not start following its topics"
    yield
    stop.set()
    thread.join(15)
    caches["versions"].clear()


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(user).key}")
    return client


_MAPS = (
    (reads, "_placed"), (reads, "_courier_names"), (reads, "_trails"), (reads, "_states"),
    (bodies, "_bodies"),
)  # fmt: skip


def in_another_process(read: Callable[[], Any]) -> Any:
    """``read()`` as another web worker would run it: on its own thread (its own cache
    clients), with empty in-process maps."""
    saved = [getattr(module, name) for module, name in _MAPS]
    for module, name in _MAPS:
        setattr(module, name, bounded(100))
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(read())
        finally:
            connections.close_all()  # this thread's: PostgreSQL drops the test database after

    try:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(60)
    finally:
        for (module, name), value in zip(_MAPS, saved, strict=True):
            setattr(module, name, value)
    assert out, "the other process's read did not finish"
    return out[0]


class Reader:
    """One viewer's conditional reads of one order, in this process and another."""

    def __init__(self, user, order_id: int) -> None:
        self.client, self.url = client_for(user), f"/api/v1/orders/{order_id}/"
        self.tag: str | None = None
        self.body: dict | None = None

    def get(self, tag: str | None = None) -> Any:
        headers = {} if tag is None else {"HTTP_IF_NONE_MATCH": tag}
        return self.client.get(self.url, **headers)

    def first(self) -> dict:
        response = self.get()
        assert response.status_code == 200
        self.tag, self.body = response["ETag"], response.json()
        return self.body

    def changed(self) -> dict:
        """The next read, sent with the tag held: a new tag and a new body, the same in
        another process; then that tag is current in both (304, nothing built)."""
        old_tag, old_body = self.tag, self.body
        here = self.get(old_tag)
        assert here.status_code == 200, "a stale 304"
        assert here["ETag"] != old_tag and here.json() != old_body
        there = in_another_process(lambda: self.get(old_tag))
        assert there.status_code == 200, "a stale 304 in another process"
        assert (there["ETag"], there.json()) == (here["ETag"], here.json())
        self.tag, self.body = here["ETag"], here.json()
        assert self.get(self.tag).status_code == 304
        assert in_another_process(lambda: self.get(self.tag)).status_code == 304
        return self.body


def _published(pinot, order_id: int, version: int, *events: Any) -> None:
    """Publish ``events``; wait for Pinot to ingest them and the bridge to register."""
    pinot.publish(*events)
    pinot.sync()
    wait_until(
        lambda: reads.registered(order_id)[1] == version,
        20,
        f"the bridge to register v{version}",
    )


def test_every_change_of_an_order_changes_its_etag_and_body_in_every_process(
    pinot, bridge, monkeypatch
):
    real_detail_from, real_order_state = read_model.detail_from, selectors.order_state
    clock = {"now": now_ms() - now_ms() % read_model.PREDICTION_STEP_MS}
    monkeypatch.setattr(read_model, "prediction_clock", lambda: clock["now"])
    statistics = {"now": eta.Statistics(as_of=clock["now"] - 10 * MIN)}
    monkeypatch.setattr(eta, "current_statistics", lambda: statistics["now"])

    alice, bob = make_customer("alice"), make_customer("bob")
    restaurant = make_restaurant("Alpha")
    rider, other_rider = make_courier("rider"), make_courier("rider2")
    chef = get_user_model().objects.create_user("chef")
    restaurant.staff.add(chef)
    order = out_for_delivery(alice, restaurant, rider)
    t0 = now_ms() - 20 * MIN
    common = dict(customer_id=alice.pk, restaurant_id=restaurant.pk, created_at=t0, total=18.5)
    on_road = dict(common, status_time=t0 + 10 * MIN, distance_left_km=1.25)

    def moving(version: int, status: str, courier, lat: float, at: int, **more: Any) -> list:
        return [
            order_event(order.pk, version, status, **on_road, courier=(courier.pk, lat, 77.63, at),
                        **more),
            delivery_event(order.pk, version, lat, 77.63, courier_id=courier.pk,
                           restaurant_id=restaurant.pk, at=at),
        ]  # fmt: skip

    _published(pinot, order.pk, 1, *moving(1, "OUT_FOR_DELIVERY", rider, 12.961, t0 + 11 * MIN))

    owner, staff = Reader(alice.user, order.pk), Reader(chef, order.pk)
    courier, outsider = Reader(rider.user, order.pk), Reader(bob.user, order.pk)
    body = owner.first()
    staff.first()
    courier.first()
    assert body["status"] == "OUT_FOR_DELIVERY" and body["courier"]["name"] == "rider"
    work = []  # a 304 builds nothing and asks Pinot nothing
    monkeypatch.setattr(read_model, "detail_from", lambda *a: work.append("built"))
    monkeypatch.setattr(selectors, "order_state", lambda *a: work.append("pinot"))
    assert owner.get(owner.tag).status_code == 304 and work == []
    monkeypatch.setattr(read_model, "detail_from", real_detail_from)
    monkeypatch.setattr(selectors, "order_state", real_order_state)

    def nobody_else() -> None:
        """Someone who may not see the order, sending a current tag: 404, never 304."""
        assert outsider.get(owner.tag).status_code == 404
        assert in_another_process(lambda: outsider.get(owner.tag)).status_code == 404

    nobody_else()
    # The tag is the viewer's: the staff's answer is the same body under another tag.
    assert staff.tag != owner.tag and staff.body == owner.body
    assert staff.get(owner.tag).status_code == 200

    # A GPS point: a new version with the courier's new position, and a longer trail.
    _published(pinot, order.pk, 2, *moving(2, "OUT_FOR_DELIVERY", rider, 12.963, t0 + 12 * MIN))
    body = owner.changed()
    assert body["position"]["lat"] == 12.963 and len(body["path"]) == 2
    nobody_else()

    # A status.
    _published(pinot, order.pk, 3, *moving(3, "ARRIVING_AT_DOOR", rider, 12.965, t0 + 13 * MIN))
    assert owner.changed()["status"] == "ARRIVING_AT_DOOR"

    # The statistics' refresh: the prediction's basis moves.
    statistics["now"] = eta.Statistics(as_of=clock["now"])
    assert owner.changed()["eta"]["basis"]["stats_as_of"] is not None

    # The clock's next step: the prediction is made as of it.
    clock["now"] += read_model.PREDICTION_STEP_MS
    assert owner.changed()["eta"]["computed_at"] != body["eta"]["computed_at"]

    # An admin edit: the restaurant renamed (a save, announced to every process).
    restaurant.name = "Alpha Prime"
    restaurant.save()
    assert owner.changed()["restaurant"]["name"] == "Alpha Prime"
    nobody_else()

    # A courier reassignment: the new courier shown; the old one sees the order no more.
    Order.objects.filter(pk=order.pk).update(courier=other_rider)
    _published(
        pinot, order.pk, 4, *moving(4, "ARRIVING_AT_DOOR", other_rider, 12.966, t0 + 14 * MIN)
    )
    assert owner.changed()["courier"]["name"] == "rider2"
    assert courier.get(courier.tag).status_code == 404
    assert in_another_process(lambda: courier.get(courier.tag)).status_code == 404

    # Access revoked: the staff member leaves the restaurant; their tag earns a 404.
    assert staff.get().status_code == 200
    tag = staff.get()["ETag"]
    restaurant.staff.remove(chef)
    assert staff.get(tag).status_code == 404
    assert in_another_process(lambda: staff.get(tag)).status_code == 404
    nobody_else()


def test_my_orders_list_changes_its_etag_with_the_orders_it_shows(pinot, bridge, monkeypatch):
    """A list's validator comes from the register too (the newest change of each scope
    it shows): a status change of a listed order changes it, in every process."""
    alice = make_customer("alice")
    restaurant = make_restaurant("Alpha")
    order = place(alice, restaurant)
    t0 = now_ms() - 5 * MIN
    common = dict(customer_id=alice.pk, restaurant_id=restaurant.pk, created_at=t0, total=9.5)
    _published(pinot, order.pk, 1, order_event(order.pk, 1, "PLACED_ORDER", **common,
                                               status_time=t0))  # fmt: skip
    monkeypatch.setattr(read_model, "SETTLE_MS", 0)  # the test's clock need not wait
    client, url = client_for(alice.user), "/api/v1/orders/"
    first = client.get(url)
    assert first.status_code == 200 and first.json()["results"][0]["status"] == "PLACED_ORDER"
    tag = first["ETag"]
    real_list_orders, asked = selectors.list_orders, []
    monkeypatch.setattr(selectors, "list_orders", lambda **kw: asked.append(kw))
    assert client.get(url, HTTP_IF_NONE_MATCH=tag).status_code == 304 and asked == []  # no Pinot
    monkeypatch.setattr(selectors, "list_orders", real_list_orders)
    assert in_another_process(lambda: client.get(url, HTTP_IF_NONE_MATCH=tag)).status_code == 304

    _published(pinot, order.pk, 2, order_event(order.pk, 2, "ORDER_CONFIRMED", **common,
                                               status_time=t0 + MIN))  # fmt: skip
    changed = client.get(url, HTTP_IF_NONE_MATCH=tag)
    assert changed.status_code == 200 and changed["ETag"] != tag
    assert changed.json()["results"][0]["status"] == "ORDER_CONFIRMED"
    there = in_another_process(lambda: client.get(url, HTTP_IF_NONE_MATCH=tag))
    assert (there.status_code, there["ETag"]) == (200, changed["ETag"])
    assert client.get(url, HTTP_IF_NONE_MATCH=changed["ETag"]).status_code == 304

"""Changes reach every web worker, not only the one that made them (issue 28, findings 0, 5).

Two real web processes (uvicorn, as ``make run`` starts them with ``WEB_WORKERS=2``)
share one SQLite file and nothing else: each has its own in-memory channel layer and
its own kept copies of orders. A socket held by one is closed when the other signs its
user out, and a third process (a shell, as an operator's script or the admin's saves)
deactivates a user, reassigns an order, moves a customer profile to another user or
renames what an order shows: every process acts on it. The periodic socket re-check is
set to ten minutes and kept copies have no expiry, so only the change's notice can do it
before the deadline (how soon it does is bench/'s to measure).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from runtime.conf import BASE_DIR
from tests.conftest import free_port
from tests.waiting import wait_until

#: How long a change may take to reach a process here: far more than a loaded machine
#: needs, far less than the ten-minute periodic re-check.
DEADLINE = 20.0

SETUP = """
from django.core.management import call_command
call_command("migrate", verbosity=0)
from tests.fixtures_pinot import continue_ids_after
continue_ids_after(FIRST_ID)
from django.contrib.auth import get_user_model
from tracker.accounts.services import issue_token
from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.orders import services
from tracker.orders.policy import SYSTEM
users = get_user_model().objects
alice, dave = make_customer("alice"), make_customer("dave")
erin = users.create_user("erin", password="pw-erin")
ops = users.create_user("ops", password="pw-ops", is_staff=True)
rider1, rider2 = make_courier("rider1"), make_courier("rider2")
restaurant = make_restaurant("Old Pizza")
order, daves = place(alice, restaurant), place(dave, restaurant)
for each in (order, daves):
    for _ in range(3):
        services.advance_order(each.pk, by=SYSTEM)
    services.advance_order(each.pk, by=SYSTEM, to="OUT_FOR_DELIVERY", courier=rider1)
tokens = {u.username: issue_token(u).key
          for u in (alice.user, dave.user, erin, ops, rider1.user)}
out = {"tokens": tokens, "order": order.pk, "daves": daves.pk, "restaurant": restaurant.pk}
"""


def _django(env: dict[str, str], code: str) -> dict:
    """Run ``code`` in a fresh Django process (another process than both web workers);
    it leaves what it reports in ``out``."""
    script = (
        f"import django, json, time\ndjango.setup()\nout = {{}}\n{code}\nprint(json.dumps(out))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=BASE_DIR, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_workers(real_pinot):
    """Two web processes on one SQLite file, the run's Pinot they both read, the data
    (its ids from a block of its own, as every test's that reads Pinot)."""
    from tests.fixtures_pinot import DATABASE_IDS, next_id_base

    var = BASE_DIR / "var" / f"workers-test-{uuid.uuid4().hex[:8]}"
    var.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "REDIS_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="true",  # development settings, as make run's
        DATABASE_URL=f"sqlite:///{var / 'db.sqlite3'}",
        KAFKA_TOPIC_PREFIX=real_pinot.topic_prefix,
        PINOT_BROKER_URL=real_pinot.broker_url,
        PUSH_BRIDGE_EMBEDDED="false",  # no pushes are needed here
        PUSH_RECHECK_SECONDS="600",
        ORDERTRACK_VAR_DIR=str(var),
    )
    servers, ports = [], [free_port(), free_port()]
    try:
        data = _django(env, SETUP.replace("FIRST_ID", str(next_id_base() + DATABASE_IDS)))
        for port in ports:
            servers.append(subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "config.asgi:application",
                 "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
                env=env, cwd=BASE_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        for port in ports:
            wait_until(
                lambda port=port: (
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success
                ),
                60,
                f"the web worker on {port} to start",
                interval=0.1,
                ignoring=httpx.TransportError,
            )
        yield {"env": env, "urls": [f"127.0.0.1:{port}" for port in ports], **data}
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(20)
        shutil.rmtree(var, ignore_errors=True)


@contextmanager
def _socket(url: str, path: str, token: str) -> Iterator[ClientConnection]:
    """A socket past its snapshot, closed on the way out if the server has not closed it."""
    headers = {"Authorization": f"Token {token}"}
    with connect(f"ws://{url}{path}", additional_headers=headers) as socket:
        first = json.loads(socket.recv(timeout=20))
        assert first["type"] == "snapshot", first
        yield socket


def _closed_with(socket, code: int) -> None:
    """The socket says why and closes with ``code``, before the deadline."""
    # The operations socket also carries the pipeline strip's samples and the fleet:
    # read past them (they are not what this test is about), never past an error.
    deadline = time.monotonic() + DEADLINE
    while (error := json.loads(socket.recv(timeout=deadline - time.monotonic())))["type"] in (
        "pipeline",
        "fleet",
    ):
        pass
    assert error["type"] == "error" and error["code"] == code, error
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=DEADLINE)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == code


def test_sign_out_deactivation_and_reassignment_close_sockets_on_the_other_worker(two_workers):
    one, other = two_workers["urls"]
    tokens, order = two_workers["tokens"], two_workers["order"]
    # Sign-out through the API of the worker that does not hold the socket.
    with _socket(one, f"/ws/orders/{order}/", tokens["alice"]) as alices:
        signed_out = httpx.post(
            f"http://{other}/api/v1/auth/logout/",
            headers={"Authorization": f"Token {tokens['alice']}"},
        )
        assert signed_out.status_code == 204
        _closed_with(alices, 4401)
    # Deactivation and reassignment, made by a third process (a shell, the admin's saves).
    with (
        _socket(one, "/ws/operations/", tokens["ops"]) as ops,
        _socket(other, f"/ws/orders/{order}/", tokens["rider1"]) as riders,
    ):
        _django(
            two_workers["env"],
            """
from django.contrib.auth import get_user_model
user = get_user_model().objects.get(username="ops")
user.is_active = False
user.save()
""",
        )
        _closed_with(ops, 4401)
        _django(
            two_workers["env"],
            f"""
from tracker.couriers.models import Courier
from tracker.orders import services
from tracker.orders.policy import SYSTEM
services.advance_order({order}, by=SYSTEM, to="ARRIVING_AT_DOOR",
                       courier=Courier.objects.get(user__username="rider2"))
""",
        )
        _closed_with(riders, 4404)


def test_admin_changes_to_kept_orders_reach_every_worker(two_workers):
    """Finding 5: each worker keeps the orders it has shown; moving a customer profile to
    another user, or renaming a restaurant, a product or a courier (the admin's saves,
    made here by a third process) changes what every worker shows."""
    tokens, order = two_workers["tokens"], two_workers["daves"]

    def detail(url: str, who: str) -> httpx.Response:
        headers = {"Authorization": f"Token {tokens[who]}"}
        return httpx.get(f"http://{url}/api/v1/orders/{order}/", headers=headers, timeout=10)

    def shown(body: dict) -> tuple:
        return (body["customer"]["name"], body["restaurant"]["name"],
                body["items"][0]["name"], body["courier"]["name"])  # fmt: skip

    for url in two_workers["urls"]:
        for _ in range(2):  # the first read keeps the copy that must not outlive the change
            kept = detail(url, "dave")
            assert kept.status_code == 200
            assert shown(kept.json()) == ("dave", "Old Pizza", "Margherita", "rider1")
        assert detail(url, "erin").status_code == 404
    _django(
        two_workers["env"],
        f"""
from django.contrib.auth import get_user_model
from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.orders.models import Order
order = Order.objects.get(pk={order})
profile = order.customer
profile.user = get_user_model().objects.get(username="erin")
profile.save()
order.restaurant.name = "New Pizza"
order.restaurant.save()
product = order.items.get(product__name="Margherita").product
product.name = "Margherita Nuova"
product.save()
rider = Courier.objects.get(user__username="rider1").user
rider.first_name = "Rita"
rider.save()
""",
    )
    NEW_NAMES = ("erin", "New Pizza", "Margherita Nuova", "Rita")  # noqa: N806
    for url in two_workers["urls"]:

        def changed(url: str = url) -> bool:
            theirs, old_owner = detail(url, "erin"), detail(url, "dave")
            now_shown = shown(theirs.json()) if theirs.status_code == 200 else None
            return old_owner.status_code == 404 and now_shown == NEW_NAMES

        wait_until(changed, DEADLINE, f"{url} to show the new owner and names", interval=0.05)

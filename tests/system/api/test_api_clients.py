"""Clients generated from the live schema by tools nobody here wrote work with no hand edits.

openapi-python-client builds a Python client and openapi-typescript TypeScript types from
``/api/schema/`` as the server serves it; the Python client then drives an order's whole
life against the real app (over WSGI, with Apache Kafka and Apache Pinot), and a small
TypeScript file using the types compiles with ``tsc``. The committed ``docs/openapi.json``
must equal the live schema, so a change to the API shows up in review (``make schema``).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client as DjangoClient

from tests.factories import make_courier, make_customer, make_restaurant
from tests.fixtures_pinot import order_event_of
from tracker.orders.models import Order

ROOT = Path(__file__).resolve().parents[3]
COMMITTED_SCHEMA = ROOT / "docs" / "openapi.json"
NODE_BIN = ROOT / "frontend" / "node_modules" / ".bin"
PACKAGE = "ordertrack_client"

pytestmark = pytest.mark.django_db


def serve_schema() -> dict[str, Any]:
    response = DjangoClient().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return json.loads(response.content)


@pytest.fixture(scope="module")
def schema_file(django_db_blocker, tmp_path_factory) -> Path:
    with django_db_blocker.unblock():
        schema = serve_schema()
    path = tmp_path_factory.mktemp("schema") / "openapi.json"
    path.write_text(json.dumps(schema, indent=2, sort_keys=True))
    return path


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_committed_schema_is_what_the_server_serves(schema_file):
    live = json.loads(schema_file.read_text())
    committed = json.loads(COMMITTED_SCHEMA.read_text())
    assert committed == live, "docs/openapi.json is stale: run `make schema` and commit it"


@pytest.fixture(scope="module")
def client_module(schema_file, tmp_path_factory):
    """The generated Python package, imported like any installed client."""
    out = tmp_path_factory.mktemp("python-client")
    done = run(
        sys.executable, "-m", "openapi_python_client", "generate", "--path", schema_file,
        "--meta", "none", "--output-path", out / PACKAGE, cwd=out,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        yield lambda name: importlib.import_module(f"{PACKAGE}.{name}")
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture
def served_in_process():
    """The app served in-process as Django's test client serves it: the start and end of a
    request do not close the test's database connection, whose transaction holds the
    test's data."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield WSGIHandler()
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def test_a_generated_python_client_follows_an_order_through_its_life(
    client_module, pinot, served_in_process
):
    make_customer("alice"), make_courier("rider")
    restaurant = make_restaurant()
    chef = get_user_model().objects.create_user("chef", password="pw-chef")
    restaurant.staff.add(chef)

    gen = client_module("client")
    models = client_module("models")
    api = {name: client_module(f"api.{area}.{name}") for area, name in [
        ("account", "sign_in"), ("account", "list_addresses"), ("menu", "get_menu"),
        ("orders", "place_order"), ("orders", "get_order"), ("orders", "list_orders"),
        ("orders", "advance_order"), ("orders", "cancel_order"),
        ("orders", "report_courier_locations"), ("account", "create_socket_ticket"),
        ("account", "sign_out"), ("account", "sign_out_everywhere"),
    ]}  # fmt: skip
    transport = httpx.WSGITransport(app=served_in_process)
    base = "http://testserver"

    def signed_in(username: str):
        anonymous = gen.Client(base_url=base, httpx_args={"transport": transport})
        body = models.LoginRequest(username=username, password=f"pw-{username}")
        token = api["sign_in"].sync(client=anonymous, body=body)
        assert isinstance(token, models.Token), token
        return gen.AuthenticatedClient(
            base_url=base, token=token.token, prefix="Token", httpx_args={"transport": transport}
        )

    customer, staff, courier = signed_in("alice"), signed_in("chef"), signed_in("rider")

    menu = api["get_menu"].sync(restaurant.pk, client=customer)
    products = {p.name: p for category in menu.categories for p in category.products}
    (home,) = api["list_addresses"].sync(client=customer)
    order_body = models.PlaceOrderRequest(
        restaurant_id=restaurant.pk,
        items=[
            models.OrderLineRequest(product_id=products["Margherita"].id, quantity=2),
            models.OrderLineRequest(product_id=products["Pepsi"].id, quantity=1),
        ],
        address_id=home.id,
    )
    placed = api["place_order"].sync_detailed(
        client=customer, body=order_body, idempotency_key="phone-retry-1"
    )
    assert placed.status_code == 201
    order = placed.parsed
    assert isinstance(order, models.OrderDetail)
    assert order.status == models.OrderStatus.PLACED_ORDER and order.total == "18.50"
    retry = api["place_order"].sync_detailed(
        client=customer, body=order_body, idempotency_key="phone-retry-1"
    )
    assert (retry.status_code, retry.parsed.id) == (200, order.id)
    assert Order.objects.count() == 1

    detail = api["get_order"].sync(order.id, client=customer)
    assert isinstance(detail, models.OrderDetail)
    assert [item.name for item in detail.items] == ["Margherita", "Pepsi"]
    assert detail.tracking.source == models.SourceEnum.DATABASE  # the pipeline has not run

    for expected in ["ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED", "OUT_FOR_DELIVERY"]:
        moved = api["advance_order"].sync(order.id, client=staff, body=models.TransitionRequest())
        assert isinstance(moved, models.OrderDetail), moved
        assert moved.status.value == expected
    assert moved.courier.name == "rider"

    refused = api["cancel_order"].sync_detailed(order.id, client=customer)
    assert refused.status_code == 409
    assert isinstance(refused.parsed, models.Error)
    assert refused.parsed.error.code == "conflict"
    assert "can no longer be cancelled" in refused.parsed.error.message

    accepted = api["report_courier_locations"].sync(
        order.id, client=courier, body=models.LocationPointRequest(lat=12.9731, lon=77.6201)
    )
    assert isinstance(accepted, models.Accepted) and accepted.accepted == 1
    for expected in ["ARRIVING_AT_DOOR", "DELIVERED"]:
        moved = api["advance_order"].sync(
            order.id,
            client=courier,
            body=models.TransitionRequest(status=models.OrderStatus(expected)),
        )
        assert isinstance(moved, models.OrderDetail), moved
        assert moved.status.value == expected

    # The stream job's record of the delivered order reaches Pinot, the read side.
    pinot.publish(order_event_of(Order.objects.get(), 7, "DELIVERED"))
    pinot.sync()
    page = api["list_orders"].sync(client=customer, state=models.ListOrdersState.PAST)
    assert isinstance(page, models.PaginatedOrderSummaryList), page
    assert [(o.id, o.status.value) for o in page.results] == [(order.id, "DELIVERED")]
    detail = api["get_order"].sync(order.id, client=customer)
    assert detail.tracking.source == models.SourceEnum.PINOT and detail.eta is None

    # Each sign-in is a token of its own: a socket ticket, then signing out one app, then all.
    ticket = api["create_socket_ticket"].sync(client=customer)
    assert isinstance(ticket, models.SocketTicket) and ticket.ticket, ticket
    tablet = signed_in("alice")
    assert api["sign_out"].sync_detailed(client=customer).status_code == 204
    assert api["list_addresses"].sync_detailed(client=customer).status_code == 401
    assert [a.id for a in api["list_addresses"].sync(client=tablet)] == [home.id]
    everywhere = api["sign_out_everywhere"].sync(client=tablet)
    assert isinstance(everywhere, models.SignedOut) and everywhere.tokens_revoked == 1
    assert api["list_addresses"].sync_detailed(client=tablet).status_code == 401


def typescript(schema_file: Path, tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """Compile ``source`` (strict) next to types generated from the schema."""
    assert (NODE_BIN / "tsc").exists(), "run `bash frontend/vendor.sh` (npm ci) first"
    if not (tmp_path / "ordertrack.ts").exists():
        generated = run(
            NODE_BIN / "openapi-typescript", schema_file, "-o", tmp_path / "ordertrack.ts",
            cwd=tmp_path,
        )  # fmt: skip
        assert generated.returncode == 0, generated.stdout + generated.stderr
    (tmp_path / "client.ts").write_text(source)
    return run(
        NODE_BIN / "tsc", "--noEmit", "--strict", "--target", "es2022", "--module", "es2022",
        "--moduleResolution", "bundler", "--lib", "es2022,dom", "client.ts", cwd=tmp_path,
    )  # fmt: skip


def test_typescript_using_the_generated_types_compiles(schema_file, tmp_path):
    source = (ROOT / "tests" / "clients" / "place_and_read.ts").read_text()
    compiled = typescript(schema_file, tmp_path, source)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    # ... and the types are real: a wrong body does not compile.
    line = source.splitlines().index("  restaurant_id: 1,") + 1
    refused = typescript(
        schema_file, tmp_path, source.replace("restaurant_id: 1,", 'restaurant_id: "1",')
    )
    assert f"client.ts({line}," in refused.stdout
    assert "Type 'string' is not assignable to type 'number'" in refused.stdout

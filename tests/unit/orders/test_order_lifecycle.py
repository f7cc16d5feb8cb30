"""Order commands enforce the lifecycle and write the outbox in the same transaction."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from contract.events import LIFECYCLE, OrderStatus
from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.orders import services
from tracker.orders.models import Order, OrderStatusChange
from tracker.orders.policy import SYSTEM
from tracker.outbox.models import OutboxEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_customer(), make_restaurant(), make_courier()


def _outbox(order_id: int) -> list[dict]:
    return [
        json.loads(bytes(r.payload))
        for r in OutboxEvent.objects.filter(key=str(order_id)).order_by("id")
    ]


def test_placing_an_order_writes_the_order_items_and_two_events(world):
    customer, restaurant, _ = world
    order = place(customer, restaurant)
    assert order.status == OrderStatus.PLACED_ORDER
    assert str(order.total) == "18.50"  # 2 x 8.50 + 1 x 1.50, Decimal
    events = _outbox(order.pk)
    assert [e.get("status") for e in events] == [None, "PLACED_ORDER"]
    assert events[0]["total"] == "18.50"
    assert [(i["name"], i["quantity"], i["unit_price"]) for i in events[0]["items"]] == [
        ("Margherita", 2, "8.50"),
        ("Pepsi", 1, "1.50"),
    ]


def test_an_order_walks_the_whole_lifecycle_in_order(world):
    customer, restaurant, courier = world
    order = place(customer, restaurant)
    for expected in LIFECYCLE[1:]:
        order = services.advance_order(order.pk, by=SYSTEM, via="test")
        assert order.status == expected
    assert order.courier_id == courier.pk  # assigned when it left the kitchen
    assert [e["status"] for e in _outbox(order.pk)[1:]] == [s.value for s in LIFECYCLE]
    history = list(OrderStatusChange.objects.filter(order=order).values_list("status", flat=True))
    assert history == [s.value for s in LIFECYCLE]
    with pytest.raises(services.IllegalTransition, match="final"):
        services.advance_order(order.pk, by=SYSTEM)


def test_skipping_a_status_is_refused_with_a_clear_error(world):
    customer, restaurant, _ = world
    order = place(customer, restaurant)
    with pytest.raises(services.IllegalTransition) as caught:
        services.advance_order(order.pk, by=SYSTEM, to=OrderStatus.BEING_COOKED)
    assert "cannot go from PLACED_ORDER to BEING_COOKED" in str(caught.value)
    assert "next status is ORDER_CONFIRMED" in str(caught.value)
    assert Order.objects.get(pk=order.pk).status == OrderStatus.PLACED_ORDER
    assert len(_outbox(order.pk)) == 2  # nothing emitted for the refused change


def test_cancel_is_allowed_only_before_out_for_delivery(world):
    customer, restaurant, _ = world
    early = place(customer, restaurant)
    services.advance_order(early.pk, by=SYSTEM)
    assert services.cancel_order(early.pk, by=SYSTEM).status == OrderStatus.CANCELLED

    late = place(customer, restaurant)
    while Order.objects.get(pk=late.pk).status != OrderStatus.OUT_FOR_DELIVERY:
        services.advance_order(late.pk, by=SYSTEM)
    with pytest.raises(services.IllegalTransition, match="can no longer be cancelled"):
        services.cancel_order(late.pk, by=SYSTEM)
    with pytest.raises(services.IllegalTransition):
        services.advance_order(early.pk, by=SYSTEM)  # cancelled is final


def test_unknown_status_is_refused(world):
    customer, restaurant, _ = world
    order = place(customer, restaurant)
    with pytest.raises(services.OrderError, match="unknown status"):
        services.advance_order(order.pk, by=SYSTEM, to="TELEPORTED")


def test_a_failed_transaction_leaves_neither_the_change_nor_its_event(world):
    customer, restaurant, _ = world
    order = place(customer, restaurant)
    before = OutboxEvent.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        services.advance_order(order.pk, by=SYSTEM)
        raise RuntimeError("crash after the write, before commit")
    assert Order.objects.get(pk=order.pk).status == OrderStatus.PLACED_ORDER
    assert OutboxEvent.objects.count() == before


@pytest.mark.django_db(transaction=True)
def test_outbox_refuses_writes_outside_a_transaction():
    from contract.events import OrderStatusChanged, new_event_id, now_ms
    from tracker.outbox.services import enqueue

    event = OrderStatusChanged(
        event_id=new_event_id(), event_time=now_ms(), order_id=1, placed_at=now_ms(),
        status="PLACED_ORDER",
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="inside transaction.atomic"):
        enqueue(event)


@pytest.mark.parametrize(
    ("items", "field"),
    [
        ([], "items"),
        ([services.ItemRequest(999999, 1)], "items[0].product_id"),
        ("zero", "items[0].quantity"),
    ],
)
def test_invalid_orders_name_the_field(world, items, field):
    customer, restaurant, _ = world
    if items == "zero":
        items = [services.ItemRequest(restaurant.products.first().pk, 0)]
    with pytest.raises(services.OrderError) as caught:
        services.place_order(
            customer=customer,
            restaurant=restaurant,
            items=items,
            delivery_address="x",
            delivery_lat=12.9,
            delivery_lon=77.6,
        )
    assert caught.value.field == field
    assert Order.objects.count() == 0


def test_an_idempotency_key_makes_a_retry_return_the_same_order(world):
    customer, restaurant, _ = world
    first = place(customer, restaurant, idempotency_key="retry-1")
    second = place(customer, restaurant, idempotency_key="retry-1")
    assert first.pk == second.pk
    assert Order.objects.count() == 1
    assert OutboxEvent.objects.count() == 2


def test_admin_actions_go_through_the_domain_functions(world, admin_client):
    customer, restaurant, _ = world
    order = place(customer, restaurant)
    response = admin_client.post(
        "/admin/orders/order/", {"action": "advance", "_selected_action": [order.pk]}, follow=True
    )
    assert response.status_code == 200
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ORDER_CONFIRMED
    assert _outbox(order.pk)[-1]["status"] == "ORDER_CONFIRMED"
    for _ in range(3):  # BEING_PREPARED, BEING_COOKED, OUT_FOR_DELIVERY
        services.advance_order(order.pk, by=SYSTEM)
    response = admin_client.post(
        "/admin/orders/order/", {"action": "cancel", "_selected_action": [order.pk]}, follow=True
    )
    assert "can no longer be cancelled" in response.content.decode()
    assert Order.objects.get(pk=order.pk).status == OrderStatus.OUT_FOR_DELIVERY


def test_admin_changelists_render_for_every_model(world, admin_client):
    customer, restaurant, _ = world
    place(customer, restaurant)
    for path in [
        "orders/order",
        "orders/orderitem",
        "orders/orderstatuschange",
        "customers/customer",
        "customers/address",
        "restaurants/restaurant",
        "restaurants/product",
        "couriers/courier",
        "outbox/outboxevent",
    ]:
        response = admin_client.get(f"/admin/{path}/?q=a")
        assert response.status_code == 200, path


def test_the_commands_ask_the_policy_for_the_acting_user(world):
    """Every channel calls the same commands with its user, so no channel can skip a check:
    an order someone may not see is absent, a step they may not make is refused, and
    nothing is written for either."""
    from django.contrib.auth import get_user_model
    from django.core.exceptions import PermissionDenied

    from tracker.orders import policy

    customer, restaurant, courier = world
    order = place(customer, restaurant)
    chef = get_user_model().objects.create_user("chef")
    restaurant.staff.add(chef)
    stranger = make_customer("mallory").user
    written = OutboxEvent.objects.count()
    with pytest.raises(policy.NotVisible):
        services.advance_order(order.pk, by=stranger)
    with pytest.raises(policy.NotVisible):
        services.cancel_order(order.pk, by=courier.user)  # not (yet) its courier
    with pytest.raises(PermissionDenied):
        services.advance_order(order.pk, by=customer.user)  # customers do not cook
    with pytest.raises(services.OrderError, match="cancel endpoint"):
        services.advance_order(order.pk, by=SYSTEM, to=OrderStatus.CANCELLED)
    assert OutboxEvent.objects.count() == written
    assert services.advance_order(order.pk, by=chef).status == OrderStatus.ORDER_CONFIRMED
    for _ in range(3):
        services.advance_order(order.pk, by=chef, courier=courier)
    with pytest.raises(PermissionDenied):
        services.advance_order(order.pk, by=chef)  # the road is the courier's
    with pytest.raises(PermissionDenied, match="Couriers cannot cancel"):
        services.cancel_order(order.pk, by=courier.user)
    moved = services.advance_order(order.pk, by=courier.user)
    assert moved.status == OrderStatus.ARRIVING_AT_DOOR
    assert OrderStatusChange.objects.filter(order=order).latest("id").actor == "user:rider"
    services.advance_order(order.pk, by=courier.user, via="api")
    assert OrderStatusChange.objects.filter(order=order).latest("id").actor == "api:rider"

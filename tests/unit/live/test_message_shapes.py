"""One declaration per shape: the pushed ``update`` is rendered by the serializers REST
renders the detail with, and the share allow-list is derived from those shapes."""

from __future__ import annotations

from contract.events import now_ms
from tests.fixtures_pinot import order_event
from tracker.live import messages
from tracker.tracking import serializers


def _update() -> dict:
    t0 = now_ms() - 600_000
    event = order_event(
        5, 3, "OUT_FOR_DELIVERY", customer_id=2, restaurant_id=3, created_at=t0,
        status_time=t0 + 1_000, total=18.5, status_times={"ORDER_CONFIRMED": t0 + 60_000},
        courier=(9, 12.96, 77.6, t0 + 5_000), distance_left_km=1.23456,
    )  # fmt: skip
    return messages.update_from_enriched(event, status_changed=True)


def test_the_update_is_the_update_serializers_fields_and_its_type():
    update = _update()
    assert set(update) == {"type", *serializers.OrderUpdateSerializer().fields}
    assert update["type"] == "update" and update["kind"] == "status"
    assert update["total"] == "18.50" and update["distance_left_km"] == 1.235
    assert set(update["status_times"]) == {"PLACED_ORDER", "ORDER_CONFIRMED", "OUT_FOR_DELIVERY"}
    assert set(update["eta"]) == set(serializers.EtaSerializer().fields)


def test_the_state_fields_are_declared_once_for_every_shape_of_an_order():
    state = set(serializers.OrderStateSerializer().fields)
    for shape in (serializers.OrderDetailSerializer, serializers.OrderSummarySerializer,
                  serializers.OrderUpdateSerializer):  # fmt: skip
        fields = shape._declared_fields
        assert state <= set(fields), shape
        assert all(
            fields[name] is serializers.OrderStateSerializer._declared_fields[name]
            for name in state
        ), shape


def test_the_share_allow_list_names_fields_of_the_orders_own_shapes():
    detail = serializers.OrderDetailSerializer().fields
    order = messages.SHARE_ALLOW_LIST["snapshot"]["order"]
    assert set(order) == {*messages.SHARED_DETAIL, "destination"}
    assert set(order["timeline"][0]) == set(detail["timeline"].child.fields)
    assert set(order["eta"]) == set(messages.SHARED_ARRIVAL)  # not what it rests on
    update = messages.SHARE_ALLOW_LIST["update"]
    assert set(update) == {"type", *messages.SHARED_UPDATE}
    shared = messages.share_view(_update(), "OUT_FOR_DELIVERY")
    assert set(shared) == set(update) and "total" not in shared and "order_id" not in shared

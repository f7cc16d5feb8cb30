"""What the push bridge sends for each record (tracker/live/decisions.py), decided with no
Kafka and no channel layer: duplicates dropped once for every socket, position-only
updates coalesced within a poll, every status sent in order, and each message's groups."""

from __future__ import annotations

import json

from contract.events import DeliveryLocation, OrderStatusChanged, new_event_id, now_ms
from tests.fixtures_pinot import order_event
from tracker.live.decisions import (
    FAST_STATUS_MAX_AGE_MS,
    LastSeen,
    Outgoing,
    Poll,
    Routing,
    peek_routing,
    status_groups,
    update_groups,
)

NOW = now_ms()


def _status(order_id, status, previous, at=NOW, **parties):
    return OrderStatusChanged(
        event_id=new_event_id(), event_time=at, order_id=order_id, placed_at=at - 60_000,
        status=status, previous_status=previous, **parties,
    )  # fmt: skip


def _point(order_id, at, courier_id=7, lat=12.97):
    return DeliveryLocation(
        event_id=new_event_id(), event_time=at, order_id=order_id, placed_at=at - 600_000,
        courier_id=courier_id, lat=lat, lon=77.59,
    )  # fmt: skip


def _enriched(order_id, version, status="OUT_FOR_DELIVERY"):
    return order_event(order_id, version, status, customer_id=9, restaurant_id=1)


def _sent(out: list[Outgoing]) -> list[tuple[str, int | None, list[str]]]:
    """Each outgoing message as (event type, version or None, groups)."""
    return [(type(o.event).__name__, getattr(o.event, "version", None), o.groups) for o in out]


def test_an_enriched_version_is_news_once_and_says_whether_its_status_moved():
    ledger = LastSeen()
    assert ledger.enriched(5, 1, "ORDER_CONFIRMED") is True  # first seen: a status
    assert ledger.enriched(5, 2, "ORDER_CONFIRMED") is False  # newer, same status: a move
    assert ledger.enriched(5, 2, "BEING_PREPARED") is None  # same version: a re-emit
    assert ledger.enriched(5, 1, "PLACED_ORDER") is None  # older: a replay
    assert ledger.enriched(5, 3, "BEING_PREPARED") is True


def test_a_raw_status_is_news_only_when_further_along_than_either_path_published():
    ledger = LastSeen()
    assert not ledger.fast_status(_status(5, "PLACED_ORDER", None), NOW)  # a placement
    confirmed = _status(5, "ORDER_CONFIRMED", "PLACED_ORDER")
    assert ledger.fast_status(confirmed, NOW)
    assert not ledger.fast_status(confirmed, NOW)  # the re-send
    # The stream job was quicker for the next status: its raw event, late, is no news.
    assert ledger.enriched(5, 3, "BEING_PREPARED") is True
    assert not ledger.fast_status(_status(5, "BEING_PREPARED", "ORDER_CONFIRMED"), NOW)
    # An older enriched status never lowers how far the order is known to be.
    assert ledger.enriched(6, 1, "BEING_COOKED") is True
    assert ledger.enriched(6, 2, "BEING_PREPARED") is True
    assert not ledger.fast_status(_status(6, "BEING_COOKED", "BEING_PREPARED"), NOW)


def test_a_raw_status_or_point_older_than_the_limit_is_no_news():
    ledger = LastSeen()
    stale = NOW - FAST_STATUS_MAX_AGE_MS - 1
    assert not ledger.fast_status(_status(5, "ORDER_CONFIRMED", "PLACED_ORDER", at=stale), NOW)
    assert not ledger.fast_position(_point(5, stale), NOW)
    assert ledger.fast_status(_status(5, "ORDER_CONFIRMED", "PLACED_ORDER", at=NOW - 1000), NOW)


def test_a_point_is_news_only_when_newer_than_the_last_one_published_for_its_order():
    ledger = LastSeen()
    assert ledger.fast_position(_point(5, NOW - 1000), NOW)
    assert not ledger.fast_position(_point(5, NOW - 1000), NOW)  # the re-send
    assert not ledger.fast_position(_point(5, NOW - 2000), NOW)  # an older one
    assert ledger.fast_position(_point(5, NOW), NOW)
    assert ledger.fast_position(_point(6, NOW - 2000), NOW)  # another order's own clock


def test_the_ledger_forgets_its_oldest_order_beyond_its_limit():
    ledger = LastSeen(limit=2)
    for order_id in (1, 2, 3):
        ledger.enriched(order_id, 4, "ORDER_CONFIRMED")
    assert ledger.enriched(1, 4, "ORDER_CONFIRMED") is True  # forgotten: news again
    assert ledger.enriched(3, 4, "ORDER_CONFIRMED") is None  # still remembered


def test_a_poll_sends_statuses_at_once_and_only_the_newest_move_of_an_order_last():
    poll = Poll(LastSeen(), NOW)
    for version in (1, 2, 3, 4):
        poll.take(_enriched(5, version))
    poll.take(_enriched(6, 1, "ORDER_CONFIRMED"))
    out, fleet = poll.finish()
    order_5, order_6 = update_groups(_enriched(5, 1), False), update_groups(_enriched(6, 1), False)
    assert _sent(out) == [
        ("OrderEnriched", 1, [*order_5, "operations"]),
        ("OrderEnriched", 1, [*order_6, "operations"]),
        ("OrderEnriched", 4, order_5),  # 2 and 3 were replaced by 4
    ]
    assert [o.status_changed for o in out] == [True, True, False]
    assert poll.coalesced == 2
    assert fleet == []


def test_a_status_change_drops_the_move_waiting_before_it_in_the_poll():
    poll = Poll(LastSeen(), NOW)
    poll.take(_enriched(5, 1))
    poll.take(_enriched(5, 2))  # a move, waiting for the end of the poll
    poll.take(_enriched(5, 3, "ARRIVING_AT_DOOR"))  # carries the full state
    poll.take(_enriched(5, 2))  # a replay: nothing
    out, _ = poll.finish()
    assert [(o.event.version, o.status_changed) for o in out] == [(1, True), (3, True)]
    assert poll.coalesced == 1


def test_a_poll_sends_each_orders_newest_point_once_to_its_order_and_to_the_fleet():
    ledger = LastSeen()
    poll = Poll(ledger, NOW)
    for at in (NOW - 2000, NOW, NOW - 1000):
        poll.take(_point(5, at))
    poll.take(_status(8, "ORDER_CONFIRMED", "PLACED_ORDER", customer_id=9))
    out, fleet = poll.finish()
    assert _sent(out) == [
        ("OrderStatusChanged", None, ["order.8", "customer.9"]),
        ("DeliveryLocation", None, ["order.5"]),
    ]
    assert out[1].event.event_time == NOW and fleet == [out[1].event]
    again = Poll(ledger, NOW)
    again.take(_point(5, NOW))
    assert again.finish() == ([], [])  # the same point, re-sent


def test_a_late_point_of_a_finished_ride_reaches_its_order_but_not_the_fleet():
    ledger = LastSeen()
    ledger.enriched(5, 7, "DELIVERED")
    poll = Poll(ledger, NOW)
    poll.take(_point(5, NOW))
    out, fleet = poll.finish()
    assert _sent(out) == [("DeliveryLocation", None, ["order.5"])]
    assert fleet == []


def test_groups_of_each_kind_of_message():
    enriched = _enriched(5, 1)
    assert update_groups(enriched, False) == ["order.5", "customer.9", "restaurant.1"]
    assert update_groups(enriched, True) == ["order.5", "customer.9", "restaurant.1", "operations"]
    # A raw status names its parties when it can, and never goes to the operators' page
    # (its figures come from Pinot, after the enriched record).
    named = _status(5, "ORDER_CONFIRMED", "PLACED_ORDER", customer_id=9, restaurant_id=1)
    assert status_groups(named) == ["order.5", "customer.9", "restaurant.1"]
    assert status_groups(_status(5, "ORDER_CONFIRMED", "PLACED_ORDER")) == ["order.5"]


def test_routing_fields_are_read_from_an_enriched_record_without_validating_it():
    record = json.loads(_enriched(5, 3).to_json())
    assert peek_routing(json.dumps(record).encode()) == Routing(9, 1, 3, "OUT_FOR_DELIVERY")
    # Anything that cannot be routed so is parsed, and refused or routed by its value.
    for broken in (
        b"\xff not JSON",
        None,
        b"[" * 100_000 + b"]" * 100_000,  # nested too deeply for json.loads
        json.dumps({**record, "customer_id": True}).encode(),  # not an int
        json.dumps({**record, "version": "3"}).encode(),
        json.dumps({**record, "status": "TELEPORTED"}).encode(),
        json.dumps({k: v for k, v in record.items() if k != "restaurant_id"}).encode(),
        b"[1, 2]",
    ):
        assert peek_routing(broken) is None, broken[:40] if broken else broken

"""Whole-pipeline fuzzing: no record on any topic freezes tracking (hypothesis).

Hypothesis draws orders valid at the edges of the contract's bounds (largest ids,
quantities, prices, names, lines; poles and the date line; ``placed_at`` equal to
``event_time``), their status and GPS events, invalid variants of those events (one
field replaced by a value past a bound or of the wrong JSON type) and random bytes on
every raw topic, plus random bytes and random JSON on the enriched topics and
``dead_letters``. All of it goes through the streaming query on Apache Kafka and
into Apache Pinot. Then:

* each valid order's Pinot row is what the contract's rules compute from its valid
  events (version, status and status times, item count, total, parties);
* every invalid raw event is in ``dead_letters``, with the field ``parse_event`` names;
* Pinot's poison pills (garbage on its topics, a line past INT) stop nothing and are
  never stored as wrapped-around values;
* an ordinary order placed afterwards reaches Pinot and the push bridge's sockets.

One example per run (a Spark micro-batch run costs seconds), each holding dozens of
events; the test's whole budget is about a minute and a half.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import events, rules
from contract.events import (
    LIFECYCLE,
    DeadLetter,
    EventValidationError,
    OrderPlaced,
    OrderStatusChanged,
    Topic,
    now_ms,
    parse_event,
    status_time_field,
    topic_name,
)
from contract.rules import rules_of
from runtime import kafka
from tests.waiting import wait_until

pytestmark = pytest.mark.spark

ITEM_RULES = rules_of(events.OrderItem)
ORDER_RULES = rules_of(OrderPlaced)
#: Order ids: from the test's own block of the run's Pinot (set by the test, and kept
#: across hypothesis' re-runs of it, which share the block and the tables).
_ids = iter(())
_blocks: dict[int, Iterator[int]] = {}

# Edges first: hypothesis' simplest example (the first it runs) takes the first of each.
EDGE_IDS = st.sampled_from([rules.INT64_MAX, 1, 2])
EDGE_QUANTITY = st.sampled_from([ITEM_RULES["quantity"].max, 1, 2])
EDGE_PRICE = st.sampled_from([str(ITEM_RULES["unit_price"].max), "0", "0.01", "9.50"])
EDGE_LAT = st.sampled_from([90.0, -90.0, 0.0, 12.97])
EDGE_LON = st.sampled_from([-180.0, 180.0, 0.0, 77.59])


def _name(limit: int) -> st.SearchStrategy[str]:
    return st.sampled_from(["💥" * limit, "é" * limit, "x" * limit, "A"])


def _rotated(options: list, index: int) -> st.SearchStrategy:
    """One of ``options``, starting from ``index``: even the simplest example varies."""
    return st.integers(min_value=0, max_value=len(options) - 1).map(
        lambda k: options[(index + k) % len(options)]
    )


@st.composite
def orders(draw) -> list[events.Event]:
    """One valid order at the edges of the bounds, and its valid later events."""
    order_id = next(_ids)
    start = now_ms() - draw(st.integers(min_value=60_000, max_value=3_600_000))
    lines = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "product_id": EDGE_IDS,
                    "name": _name(ITEM_RULES["name"].max_length),
                    "category": _name(ITEM_RULES["category"].max_length),
                    "quantity": EDGE_QUANTITY,
                    "unit_price": EDGE_PRICE,
                }
            ),
            min_size=2,
            max_size=3,
        )
    )
    placed = OrderPlaced.from_dict(
        {
            "event_id": str(uuid.uuid4()),
            "event_time": start,
            "order_id": order_id,
            "customer_id": draw(EDGE_IDS),
            "customer_name": draw(_name(ORDER_RULES["customer_name"].max_length)),
            "restaurant_id": draw(EDGE_IDS),
            "restaurant_name": draw(_name(ORDER_RULES["restaurant_name"].max_length)),
            "restaurant_lat": draw(EDGE_LAT),
            "restaurant_lon": draw(EDGE_LON),
            "delivery_lat": draw(EDGE_LAT),
            "delivery_lon": draw(EDGE_LON),
            "items": lines,
            "total": draw(st.sampled_from([str(ORDER_RULES["total"].max), "0", "21.00"])),
        }
    )
    out: list[events.Event] = [placed]
    steps = draw(_rotated(list(range(len(LIFECYCLE))), order_id + 2))
    for n, status in enumerate(LIFECYCLE[1 : steps + 1], start=1):
        out.append(
            OrderStatusChanged(
                event_id=str(uuid.uuid4()),
                event_time=start + n * 1000,
                order_id=order_id,
                placed_at=start,
                status=status.value,
                previous_status=LIFECYCLE[n - 1].value,
                courier_id=draw(EDGE_IDS),
            )  # fmt: skip
        )
    return out


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
PAST_BOUNDS = (
    [0, -1, 2**31, 3 * 10**9, 2**63, 10**30, 1e308, -91.0, 181.0, "1e12", "NaN", "x" * 513,
     now_ms() + 30 * 86_400_000]
)  # fmt: skip


@st.composite
def invalid_of(draw, event: events.Event, index: int) -> bytes | None:
    """``event`` with one field replaced; None when the result happens to be valid."""
    body = json.loads(event.to_json())
    field = draw(_rotated(sorted(body), index))
    body[field] = draw(st.one_of(_rotated(PAST_BOUNDS, index), JSON))
    raw = json.dumps(body).encode()
    try:
        parse_event(event.TOPIC, raw)
    except EventValidationError:
        return raw
    return None


def _expected_row(order: list[events.Event]) -> dict:
    """What the contract's rules make of an order's valid events (no cancels here)."""
    placed, statuses = order[0], order[1:]
    last = statuses[-1] if statuses else None
    row = {
        "version": len(order),
        "status": last.status if last else "PLACED_ORDER",
        "status_time": last.event_time if last else placed.event_time,
        "item_count": sum(i.quantity for i in placed.items),
        "total": float(Decimal(placed.total)),
        "customer_id": placed.customer_id,
        "restaurant_name": placed.restaurant_name,
        "delivery_lat": placed.delivery_lat,
        "created_at": placed.event_time,
    }
    times = {s.status: s.event_time for s in statuses}
    times["PLACED_ORDER"] = placed.event_time
    for status in events.OrderStatus:
        row[status_time_field(status)] = times.get(status.value, 0)  # Pinot's null stand-in
    return row


@settings(
    max_examples=1,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_record_on_any_topic_freezes_tracking(data, run_stream, pinot):
    """On the topics of the run's Pinot (the stream job also reads the raw events other
    tests left there: their orders have ids of their own)."""
    from tests.fixtures_pinot import DATABASE_IDS, item_event, order_event
    from tracker.live.bridge import Bridge
    from tracker.live.reader import run_readers
    from tracker.tracking.selectors import query

    global _ids
    _ids = _blocks.setdefault(pinot.base, iter(range(pinot.base + 1, pinot.base + DATABASE_IDS)))

    valid = data.draw(st.lists(orders(), min_size=5, max_size=7), label="orders")
    invalid: list[tuple[Topic, bytes, bytes]] = []  # (topic, key, value)
    for index, event in enumerate([e for order in valid for e in order]):
        raw = data.draw(st.one_of(invalid_of(event, index), st.none()), label="mutation")
        if raw is not None:
            invalid.append((event.TOPIC, event.key(), raw))
    for topic in events.SOURCE_TOPICS:
        for raw in data.draw(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=4)):
            invalid.append((topic, b"1", raw))
    garbage = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from([*events.ENRICHED_TOPICS, Topic.DEAD_LETTERS]),
                st.one_of(st.binary(max_size=64), JSON.map(lambda j: json.dumps(j).encode())),
            ),
            min_size=3,
            max_size=12,
        ),
        label="enriched garbage",
    )
    # Pinot's poison pills: a valid-looking line past Pinot's INT, a name with no UTF-8
    # form (a lone surrogate is valid JSON); for orders the fuzz does not check.
    line = json.loads(item_event(next(_ids), 1, "Cola", 1, 2.0).to_json())
    line["quantity"] = 3 * 10**9
    lone = json.loads(order_event(next(_ids), 1).to_json())
    lone["customer_name"] = "\ud800"
    garbage += [
        (Topic.ORDER_ITEMS_ENRICHED, json.dumps(line).encode()),
        (Topic.ORDERS_ENRICHED, json.dumps(lone).encode()),
    ]
    prod = kafka.producer()
    for order in valid:
        for event in order:
            kafka.publish(prod, event)
    for topic, key, raw in invalid:
        prod.produce(topic_name(topic), key=key, value=raw)
    for topic, raw in garbage:
        prod.produce(topic_name(topic), key=b"1", value=raw)
    assert prod.flush(10) == 0

    sent: list[tuple[str, dict]] = []
    bridge, stop, ready = Bridge(sent.extend), threading.Event(), threading.Event()
    follower = threading.Thread(target=run_readers, args=(bridge, stop, ready), daemon=True)
    try:
        run_stream()
        _wait_for_versions({o[0].order_id: len(o) for o in valid})

        # Every invalid raw event is a dead letter naming the field parse_event names.
        letters = [
            DeadLetter.from_dict({k: v for k, v in json.loads(r.value).items() if k != "schema_version"})
            for r in kafka.read_topic(Topic.DEAD_LETTERS, idle_timeout=0.5)
            if _is_letter(r.value)
        ]  # fmt: skip
        reasons = {(d.source_topic, d.original_value()): d.reason for d in letters}
        for topic, _, raw in invalid:
            try:
                parse_event(topic, raw)
                want = "message key is not the order_id"
            except EventValidationError as exc:
                want = f"invalid {exc.field}:"
            assert reasons[(topic.value, raw)].startswith(want), (topic, raw)

        # Each valid order's final row is what the rules compute from its valid events.
        for order in valid:
            expected = _expected_row(order)
            columns = ", ".join(expected)
            (row,) = query(
                f"SELECT {columns} FROM orders_enriched WHERE order_id = {order[0].order_id}"
            )
            assert row == expected
            lines = query(
                "SELECT COUNT(*) AS n FROM order_items_enriched "
                f"WHERE order_id = {order[0].order_id}"
            )
            assert lines == [{"n": len(order[0].items)}]
        # Pinot's poison pills stop nothing (the order placed afterwards arrives below),
        # and the line past INT is dropped, never kept as a wrapped-around quantity.
        kept = query(
            f"SELECT quantity FROM order_items_enriched WHERE order_id = {line['order_id']}"
        )
        assert kept == [], kept
        surrogate = query(
            f"SELECT customer_name FROM orders_enriched WHERE order_id = {lone['order_id']}"
        )
        print(
            f"pipeline fuzz: {len(valid)} orders, {sum(map(len, valid))} valid events, "
            f"{len(invalid)} invalid raw, {len(garbage)} on enriched/dead_letters, "
            f"{len(letters)} dead letters; Pinot kept the line past INT as {kept}, the lone "
            f"surrogate as {surrogate}"
        )

        # An ordinary order placed afterwards reaches Pinot and the bridge's sockets.
        follower.start()
        assert ready.wait(10)
        after = data.draw(orders(), label="after")
        for event in after:
            kafka.publish(prod, event)
        assert prod.flush(10) == 0
        run_stream()
        order_id = after[0].order_id
        _wait_for_versions({order_id: len(after)})
        deadline = now_ms() + 10_000
        while not any(g == f"order.{order_id}" for g, _ in sent) and now_ms() < deadline:
            stop.wait(0.1)
        assert any(g == f"order.{order_id}" for g, _ in sent)
    finally:
        stop.set()


def _wait_for_versions(versions: dict[int, int], timeout: float = 60) -> None:
    """Wait until Pinot holds each order at its version."""
    from tracker.tracking.selectors import query

    ids = ", ".join(map(str, versions))

    def held() -> bool:
        rows = query(f"SELECT order_id, version FROM orders_enriched WHERE order_id IN ({ids})")
        return {r["order_id"]: r["version"] for r in rows} == versions

    wait_until(held, timeout, f"Pinot to hold the orders at {versions}", interval=0.2)


def _is_letter(value: bytes) -> bool:
    """Records the job wrote to dead_letters (the test also wrote garbage there)."""
    try:
        body = json.loads(value)
        DeadLetter.from_dict({k: v for k, v in body.items() if k != "schema_version"})
    except (ValueError, AttributeError, TypeError):
        return False
    return True

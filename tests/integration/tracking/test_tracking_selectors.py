"""Contract tests of the tracking queries: known events in through the broker, exact rows out.

They run against the local Pinot server, or against a real Pinot when
PINOT_BROKER_URL is set (see tests/fixtures_pinot.py).
"""

from __future__ import annotations

import pytest

from contract.events import now_ms
from tests.fixtures_pinot import delivery_event, item_event, order_event
from tracker.tracking import selectors as s
from tracker.tracking.exceptions import TrackingUnavailable

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR


def test_order_state_takes_the_highest_version_even_when_it_arrives_first(pinot):
    oid = pinot.base + 1
    t = now_ms() - 10 * MIN
    pinot.publish(
        order_event(oid, 1, created_at=t),
        order_event(oid, 3, "BEING_PREPARED", created_at=t, status_time=t + 3 * MIN),
        order_event(oid, 2, "ORDER_CONFIRMED", created_at=t, status_time=t + MIN),  # late
        order_event(oid, 2, "ORDER_CONFIRMED", created_at=t, status_time=t + MIN),  # duplicate
    )
    pinot.sync()
    state = s.order_state(oid)
    assert (state.version, state.status, state.status_time) == (3, "BEING_PREPARED", t + 3 * MIN)
    assert state.status_times == {"PLACED_ORDER": t, "BEING_PREPARED": t + 3 * MIN}
    assert state.items[0] == {
        "product_id": 1,
        "name": "Margherita",
        "category": "pizza",
        "quantity": 2,
        "unit_price": "8.50",
    }
    assert state.courier is None and state.distance_left_km is None and state.is_active
    assert s.order_state(pinot.base + 99) is None


def test_equal_versions_the_later_offset_wins(pinot):
    oid = pinot.base + 1
    pinot.publish(order_event(oid, 5, total=10.0), order_event(oid, 5, total=11.0))
    pinot.sync()
    assert s.order_state(oid).total == 11.0


def test_status_history_reads_skip_upsert_history_in_order(pinot):
    oid = pinot.base + 1
    t = now_ms() - HOUR
    steps = [("PLACED_ORDER", t), ("ORDER_CONFIRMED", t + 60_000), ("BEING_PREPARED", t + 90_000)]
    events = [
        order_event(oid, i + 1, st, created_at=t, status_time=at)
        for i, (st, at) in enumerate(steps)
    ]
    # out of order and duplicated, as an at-least-once stream may deliver them
    pinot.publish(events[0], events[2], events[1], events[1])
    pinot.sync()
    assert s.order_status_history(oid) == [
        s.StatusPeriod("PLACED_ORDER", t, t + 60_000, 60_000),
        s.StatusPeriod("ORDER_CONFIRMED", t + 60_000, t + 90_000, 30_000),
        s.StatusPeriod("BEING_PREPARED", t + 90_000, None, None),
    ]
    # both skipUpsert forms see all 4 stored records; without it, one row
    sql = "SELECT version FROM orders_enriched WHERE order_id = %(o)s ORDER BY version LIMIT 100"
    assert [r["version"] for r in s.query(sql, {"o": oid})] == [3]
    assert [r["version"] for r in s.query("SET skipUpsert = true; " + sql, {"o": oid})] == [
        1,
        2,
        2,
        3,
    ]
    assert [r["version"] for r in s.query(sql + " option(skipUpsert=true)", {"o": oid})] == [
        1,
        2,
        2,
        3,
    ]


def test_list_orders_newest_first_with_filters_and_pages(pinot):
    cust = pinot.base + 5
    t = now_ms() - DAY
    pinot.publish(
        *[
            order_event(pinot.base + i, 1, customer_id=cust, created_at=t + i * MIN)
            for i in range(1, 13)
        ],
        # Order 3 delivered, order 4 cancelled: the two past ones.
        order_event(pinot.base + 3, 2, "DELIVERED", customer_id=cust, created_at=t + 3 * MIN,
                    status_time=t + 40 * MIN),
        order_event(pinot.base + 4, 2, "CANCELLED", customer_id=cust, created_at=t + 4 * MIN,
                    status_time=t + 5 * MIN),
        order_event(pinot.base + 50, 1, customer_id=cust + 1, created_at=t),  # someone else
    )  # fmt: skip
    pinot.sync()
    ids = lambda orders: [o.order_id - pinot.base for o in orders]  # noqa: E731
    assert ids(s.list_orders(customer_id=cust, limit=100)) == list(range(12, 0, -1))
    assert ids(s.list_orders(customer_id=cust, limit=5, offset=5)) == [7, 6, 5, 4, 3]
    assert ids(s.list_orders(customer_id=cust, state="past")) == [4, 3]
    assert ids(s.list_orders(customer_id=cust, state="active", limit=3)) == [12, 11, 10]
    assert ids(s.list_orders(customer_id=cust, status="DELIVERED")) == [3]
    # Pinot's default LIMIT 10 applies to a query without LIMIT
    rows = s.query("SELECT order_id FROM orders_enriched WHERE customer_id = %(c)s", {"c": cust})
    assert len(rows) == 10


def test_time_in_status_percentiles_use_pinots_percentile(pinot):
    rid = pinot.base + 9
    now = now_ms()
    ages = [10, 20, 30, 40]  # seconds in BEING_COOKED: p50 index floor(4*50/100)=2 -> 30
    events = [
        order_event(
            pinot.base + i, 4, "BEING_COOKED", restaurant_id=rid, status_time=now - a * 1000
        )
        for i, a in enumerate(ages)
    ]
    events += [
        order_event(
            pinot.base + 10, 2, "ORDER_CONFIRMED", restaurant_id=rid, status_time=now - 5000
        ),
        order_event(pinot.base + 11, 7, "DELIVERED", restaurant_id=rid, status_time=now - 99_000),
    ]
    pinot.publish(*events)
    pinot.sync()
    got = s.time_in_status_percentiles(restaurant_id=rid, as_of_ms=now)
    assert got == [
        s.StatusPercentiles("ORDER_CONFIRMED", 1, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0),
        s.StatusPercentiles("BEING_COOKED", 4, 10.0, 30.0, 25.0, 40.0, 40.0, 40.0, 40.0),
    ]
    live = s.time_in_status_percentiles(restaurant_id=rid)  # with Pinot's now()
    assert [p.status for p in live] == ["ORDER_CONFIRMED", "BEING_COOKED"]
    assert 10.0 <= live[1].min < 15.0


def test_stuck_orders_longest_waiting_first(pinot):
    rid = pinot.base + 3
    now = now_ms()
    pinot.publish(
        order_event(
            pinot.base + 1, 4, "BEING_COOKED", restaurant_id=rid, status_time=now - 5 * MIN
        ),
        order_event(
            pinot.base + 2, 4, "BEING_COOKED", restaurant_id=rid, status_time=now - 9 * MIN
        ),
        order_event(pinot.base + 3, 4, "BEING_COOKED", restaurant_id=rid, status_time=now - 30_000),
        order_event(
            pinot.base + 4, 3, "BEING_PREPARED", restaurant_id=rid, status_time=now - 20 * MIN
        ),
        order_event(pinot.base + 5, 7, "DELIVERED", restaurant_id=rid, status_time=now - 50 * MIN),
    )
    pinot.sync()
    stuck = s.stuck_orders(2 * MIN, status="BEING_COOKED", restaurant_id=rid)
    assert [o.order_id - pinot.base for o in stuck] == [2, 1]
    assert 9 * 60 <= stuck[0].seconds_in_status < 9 * 60 + 30
    anywhere = s.stuck_orders(2 * MIN, restaurant_id=rid)
    assert [o.order_id - pinot.base for o in anywhere] == [4, 2, 1]


def test_courier_path_and_latest_positions_in_a_polygon(pinot):
    a, b, c = pinot.base + 1, pinot.base + 2, pinot.base + 3
    t = now_ms() - MIN
    # a moves along a line; its version 3 arrives before version 2
    pinot.publish(
        delivery_event(a, 1, 52.500, 13.400, at=t),
        delivery_event(a, 3, 52.510, 13.420, at=t + 2000),
        delivery_event(a, 2, 52.505, 13.410, at=t + 1000),
        # the courier at the door: the same point again, under the status change's version
        delivery_event(a, 4, 52.510, 13.420, at=t + 2000, status="ARRIVING_AT_DOOR"),
        delivery_event(b, 1, 52.600, 13.600, at=t),  # outside the box
        delivery_event(c, 1, 52.508, 13.415, at=t, status="DELIVERED"),  # inside, not in transit
    )
    pinot.sync()
    assert [p.version for p in s.courier_path(a)] == [1, 2, 3]  # each point once
    assert s.courier_path(pinot.base + 77) == []
    box = [(13.39, 52.49), (13.43, 52.49), (13.43, 52.52), (13.39, 52.52)]
    # The highest version (other tests' couriers may be there too).
    [latest] = [p for p in s.deliveries_in_area(box) if p.order_id in (a, b, c)]
    assert (latest.order_id, latest.lat, latest.lon, latest.version, latest.at) == (
        a, 52.510, 13.420, 4, t + 2000,
    )  # fmt: skip
    # the same query as Pinot SQL with the book's WKT form, counting
    wkt = s.polygon_wkt(box)
    rows = s.query(
        "SELECT COUNT(*) AS n FROM delivery_statuses WHERE "
        "ST_Contains(ST_GeomFromText(%(wkt)s), toGeometry(location)) = 1 AND order_id IN (%(ids)s)",
        {"wkt": wkt, "ids": [a, b, c]},
    )
    assert rows == [{"n": 2}]


def test_restaurant_dashboard_windows_and_top_dishes(pinot):
    r1, r2 = pinot.base + 1, pinot.base + 2
    now = now_ms()
    placed = {  # order -> (restaurant, created ago, total, status)
        1: (r1, 10 * MIN, 10.0, "PLACED_ORDER"),
        2: (r1, 50 * MIN, 20.0, "DELIVERED"),
        3: (r1, 90 * MIN, 40.0, "DELIVERED"),  # previous hour
        4: (r1, 5 * HOUR, 80.0, "DELIVERED"),
        5: (r1, 30 * HOUR, 160.0, "DELIVERED"),  # previous day
        6: (r1, 3 * DAY, 320.0, "DELIVERED"),
        7: (r1, 10 * DAY, 640.0, "DELIVERED"),  # previous week
        8: (r1, 20 * MIN, 999.0, "CANCELLED"),  # not a sale
        9: (r2, 5 * MIN, 7.5, "PLACED_ORDER"),
    }
    events = [
        order_event(
            pinot.base + o,
            2,
            st,
            restaurant_id=r,
            created_at=now - ago,
            status_time=now - ago + 1,
            total=total,
        )
        for o, (r, ago, total, st) in placed.items()
    ]
    items = [
        item_event(pinot.base + 1, 1, "Margherita", 2, 5.0, restaurant_id=r1, at=now - 10 * MIN),
        item_event(pinot.base + 2, 1, "Margherita", 1, 5.0, restaurant_id=r1, at=now - 50 * MIN),
        item_event(pinot.base + 2, 2, "Tiramisu", 3, 5.0, restaurant_id=r1, at=now - 50 * MIN),
        item_event(
            pinot.base + 2, 2, "Tiramisu", 3, 5.0, restaurant_id=r1, at=now - 50 * MIN
        ),  # dup
        item_event(pinot.base + 1, 2, "Cola", 1, 2.0, restaurant_id=r1, at=now - 10 * MIN),
        item_event(pinot.base + 1, 3, "Salad", 1, 2.0, restaurant_id=r1, at=now - 10 * MIN),
        item_event(pinot.base + 4, 1, "Calzone", 9, 8.0, restaurant_id=r1, at=now - 5 * HOUR),
        item_event(pinot.base + 9, 1, "Salad", 1, 7.5, restaurant_id=r2, at=now - 5 * MIN),
    ]
    pinot.publish(*events, *items)
    pinot.sync()
    dash = {d.restaurant_id: d for d in s.restaurant_dashboard(r1) + s.restaurant_dashboard(r2)}
    w = dash[r1].windows
    assert (w["1h"].orders, w["1h"].sales, w["1h"].previous_orders, w["1h"].previous_sales) == (
        2,
        30.0,
        1,
        40.0,
    )
    assert (w["24h"].orders, w["24h"].sales, w["24h"].previous_orders, w["24h"].previous_sales) == (
        4,
        150.0,
        1,
        160.0,
    )
    assert (w["7d"].orders, w["7d"].sales, w["7d"].previous_orders, w["7d"].previous_sales) == (
        6,
        630.0,
        1,
        640.0,
    )
    assert w["1h"].top_dishes == [
        s.Dish("Margherita", 3, 2),
        s.Dish("Tiramisu", 3, 1),
        s.Dish("Cola", 1, 1),
    ]
    assert w["24h"].top_dishes[0] == s.Dish("Calzone", 9, 1)
    assert dash[r1].restaurant_name == f"Restaurant {r1}"
    assert dash[r2].windows["1h"].top_dishes == [s.Dish("Salad", 1, 1)]
    assert dash[r2].windows["1h"].previous_sales == 0.0


def test_unreachable_pinot_raises_tracking_unavailable(monkeypatch):
    from localrun.ports import free_port

    monkeypatch.setenv("PINOT_BROKER_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TrackingUnavailable):
        s.order_state(1)


def test_reads_from_many_threads_at_once_each_get_their_own_order(pinot):
    """Django serves every request on a thread of its own; they share one connection."""
    from concurrent.futures import ThreadPoolExecutor

    statuses = ["PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED"]
    orders = {pinot.base + i: statuses[i % 3] for i in range(1, 25)}
    pinot.publish(*[order_event(oid, 1, status) for oid, status in orders.items()])
    pinot.sync()
    with ThreadPoolExecutor(8) as pool:
        states = list(pool.map(s.order_state, [*orders, *orders]))
    assert [(st.order_id, st.status) for st in states] == [*orders.items(), *orders.items()]


def test_pinot_error_raises_tracking_unavailable(pinot):
    with pytest.raises(TrackingUnavailable, match="Unknown"):
        s.query("SELECT no_such_column FROM orders_enriched LIMIT 1")


def test_top_dishes_leave_out_the_lines_of_cancelled_orders(pinot):
    r = pinot.base + 1
    now = now_ms()
    kept, cancelled = pinot.base + 1, pinot.base + 2
    pinot.publish(
        order_event(kept, 2, "DELIVERED", restaurant_id=r, created_at=now - 10 * MIN),
        order_event(cancelled, 2, "CANCELLED", restaurant_id=r, created_at=now - 5 * MIN),
        item_event(kept, 1, "Margherita", 1, 8.5, restaurant_id=r, at=now - 10 * MIN),
        item_event(cancelled, 1, "Calzone", 5, 9.0, restaurant_id=r, at=now - 5 * MIN),
        item_event(cancelled, 2, "Margherita", 4, 8.5, restaurant_id=r, at=now - 5 * MIN),
    )
    pinot.sync()
    (board,) = s.restaurant_dashboard(r)
    for window in ("1h", "24h", "7d"):
        assert board.windows[window].top_dishes == [s.Dish("Margherita", 1, 1)]


def test_sales_series_buckets_the_window_against_the_period_before(pinot):
    r, other = pinot.base + 1, pinot.base + 2
    end = now_ms()
    placed = [  # (order, restaurant, placed this long before `end`, total, status)
        (1, r, 2 * MIN, 10.0, "PLACED_ORDER"),  # last 5-minute bucket
        (2, r, 3 * MIN, 5.0, "DELIVERED"),  # same bucket
        (3, r, 58 * MIN, 7.0, "DELIVERED"),  # first bucket of the hour
        (4, r, 62 * MIN, 20.0, "DELIVERED"),  # the hour before: its last bucket
        (5, r, 4 * MIN, 99.0, "CANCELLED"),  # not a sale
        (6, other, 2 * MIN, 50.0, "DELIVERED"),  # another restaurant
        (7, r, 3 * HOUR, 1.0, "DELIVERED"),  # outside both periods
    ]
    pinot.publish(
        *[
            order_event(pinot.base + o, 2, st, restaurant_id=rid, created_at=end - ago, total=t)
            for o, rid, ago, t, st in placed
        ]
    )
    pinot.sync()
    series = s.restaurant_sales_series(r, "1h", as_of_ms=end)
    assert len(series) == 12
    assert [b.start for b in series] == [end - HOUR + i * 5 * MIN for i in range(12)]
    assert (series[-1].orders, series[-1].sales) == (2, 15.0)
    assert (series[0].orders, series[0].sales) == (1, 7.0)
    # 62 min before the end is 2 min before the hour began: the previous period's last bucket.
    assert (series[-1].previous_orders, series[-1].previous_sales) == (1, 20.0)
    assert sum(b.orders for b in series) == 3 and sum(b.previous_orders for b in series) == 1
    everyone = s.restaurant_sales_series(None, "1h", as_of_ms=end)
    assert everyone[-1].orders >= 3
    assert [len(s.restaurant_sales_series(r, w, as_of_ms=end)) for w in ("24h", "7d")] == [24, 28]


class DroppingBroker:
    """A broker on loopback that resets the first ``drops`` connections as soon as it reads
    the query (as a full accept queue or an expired keep-alive does), then answers."""

    ANSWER = {
        "resultTable": {"dataSchema": {"columnNames": ["n"], "columnDataTypes": ["LONG"]},
                        "rows": [[7]]},
        "exceptions": [], "numServersQueried": 1, "numServersResponded": 1, "timeUsedMs": 1,
    }  # fmt: skip

    def __init__(self, drops: int) -> None:
        import socket
        import threading

        self.drops, self.connections = drops, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import json
        import socket
        import struct

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                if self.connections <= self.drops:  # RST, not FIN
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    continue
                body = json.dumps(self.ANSWER).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("drops, answered", [(1, True), (2, False)])
def test_a_query_on_a_connection_the_broker_drops_is_sent_once_more(monkeypatch, drops, answered):
    broker = DroppingBroker(drops)
    monkeypatch.setenv("PINOT_BROKER_URL", broker.url)
    try:
        if answered:
            assert s.query("SELECT n FROM t") == [{"n": 7}]
        else:
            with pytest.raises(TrackingUnavailable):
                s.query("SELECT n FROM t")
        assert broker.connections == 2
    finally:
        broker.close()

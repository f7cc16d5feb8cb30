"""What the selectors rely on in Apache Pinot 0.11 (the version run: docs/pinot.md), and
where it differs from what the table files and queries were first written for (the
former DuckDB imitation, Pinot 1.x), asserted on real Pinot.

Each test publishes to the run's tables with its own ids (tests/fixtures_pinot.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import time
import uuid

import httpx
import pytest

from contract.events import Topic, now_ms, topic_name
from pinot import deployment, loader
from pinot.definitions import load_tables
from tests.fixtures_pinot import delivery_event, item_event, order_event
from tests.waiting import wait_until
from tracker.operations.pinot_controller import PinotController
from tracker.tracking import selectors as s
from tracker.tracking.exceptions import TrackingUnavailable

MIN = 60_000


def test_a_group_by_with_filter_clauses_is_refused_and_the_dashboard_does_without(
    pinot,
):
    """0.11's single-stage engine refuses ``FILTER (WHERE ...)`` beside ``GROUP BY``; the
    dashboard's windows are ``SUM(CASE WHEN ...)`` and its dish orders a corrected
    DISTINCTCOUNT."""
    r = pinot.base + 1
    now = now_ms()
    pinot.publish(
        order_event(pinot.base + 1, 1, restaurant_id=r, created_at=now - 10 * MIN, total=10.0),
        order_event(pinot.base + 2, 1, restaurant_id=r, created_at=now - 90 * MIN, total=40.0),
        item_event(pinot.base + 1, 1, "Margherita", 2, 8.5, restaurant_id=r, at=now - 10 * MIN),
        item_event(pinot.base + 2, 1, "Margherita", 1, 8.5, restaurant_id=r, at=now - 90 * MIN),
    )
    pinot.sync()
    with pytest.raises(TrackingUnavailable, match="GROUP BY with FILTER clauses is"):
        s.query(
            "SELECT restaurant_id, COUNT(*) FILTER (WHERE total > 1) FROM orders_enriched "
            "WHERE restaurant_id = %(r)s GROUP BY restaurant_id LIMIT 10",
            {"r": r},
        )
    [board] = s.restaurant_dashboard(r)
    hour, day = board.windows["1h"], board.windows["24h"]
    assert (hour.orders, hour.sales, hour.previous_orders, hour.previous_sales) == (
        1,
        10.0,
        1,
        40.0,
    )
    assert (day.orders, day.sales) == (2, 50.0)
    assert [(d.product_name, d.quantity, d.orders) for d in hour.top_dishes] == [
        ("Margherita", 2, 1)
    ]
    assert [(d.product_name, d.quantity, d.orders) for d in day.top_dishes] == [
        ("Margherita", 3, 2)
    ]


def test_empty_set_aggregates_answer_infinities_as_strings(pinot):
    """An aggregate over no rows: MAX, AVG and PERCENTILE say "-Infinity", MIN "Infinity"
    (strings in the JSON), SUM 0, COUNT and DISTINCTCOUNT 0; grouped queries answer no
    row. Selectors read counts first (``rides > 0``) and never these values."""
    pinot.publish(order_event(pinot.base + 1, 1))  # a table with rows (see the next test)
    pinot.sync()
    none = pinot.base + 99
    [row] = s.query(
        "SELECT COUNT(*) AS n, MAX(total) AS mx, MIN(total) AS mn, AVG(total) AS av, "
        "SUM(total) AS sm, PERCENTILE(total, 50) AS p50, DISTINCTCOUNT(order_id) AS dc "
        "FROM orders_enriched WHERE order_id = %(id)s",
        {"id": none},
    )
    assert row == {
        "n": 0, "mx": "-Infinity", "mn": "Infinity", "av": "-Infinity", "sm": 0.0,
        "p50": "-Infinity", "dc": 0,
    }  # fmt: skip
    assert (
        s.query(
            "SELECT status, MAX(total) FROM orders_enriched WHERE order_id = %(id)s "
            "GROUP BY status LIMIT 10",
            {"id": none},
        )
        == []
    )
    assert s.ride_speeds(now_ms() - MIN, now_ms() - MIN + 1, (50, 90)) == {}


def test_a_table_whose_segments_no_server_holds_is_unavailable_not_empty(real_pinot, pinot):
    """A new table (or one whose only server is re-reading Kafka after a restart) answers
    with no row, no exception and no server queried: the selectors' transport takes that
    for "unavailable", not for an empty table. Once its consuming segments are up, an
    empty table's ``COUNT(*)`` is a row of 0."""
    name = f"empty_{uuid.uuid4().hex[:8]}"
    table = load_tables()["order_items_enriched"]
    schema = {**copy.deepcopy(table.schema), "schemaName": name}
    config = copy.deepcopy(table.config)
    config["tableName"] = name
    config["segmentsConfig"]["schemaName"] = name
    probe = dataclasses.replace(table, name=name, schema=schema, config=config)
    controller = real_pinot.controller_url
    try:
        # the session's items topic, read from its end: no row reaches this table
        config["tableIndexConfig"]["streamConfigs"][
            "stream.kafka.consumer.prop.auto.offset.reset"
        ] = "largest"
        loader.load(real_pinot.settings, {name: probe})
        with pytest.raises(TrackingUnavailable):
            s.query(f"SELECT COUNT(*) AS n FROM {name}")
        loader.wait_queryable(real_pinot.broker_url, [name], 60)
        assert s.query(f"SELECT COUNT(*) AS n FROM {name}") == [{"n": 0}]
    finally:
        httpx.delete(f"{controller}/tables/{name}", params={"type": "realtime"}, timeout=60)
        httpx.delete(f"{controller}/schemas/{name}", timeout=60)


def test_upsert_keeps_the_highest_version_and_skip_upsert_returns_every_row(pinot):
    """The comparison column is ``version`` (0.11's ``comparisonColumn``: its 1.x list form
    ``comparisonColumns`` is ignored by 0.11, which would compare ``event_time``): version
    3, published first with the latest event_time, still wins over version 2."""
    order = pinot.base + 1
    t = now_ms() - 10 * MIN
    pinot.publish(
        order_event(order, 1, "PLACED_ORDER", created_at=t, status_time=t),
        order_event(order, 3, "BEING_COOKED", created_at=t, status_time=t + 2000),
        order_event(order, 2, "ORDER_CONFIRMED", created_at=t, status_time=t + 3000),
        delivery_event(order, 2, 52.51, 13.41, at=t + 4000),
        delivery_event(order, 1, 52.50, 13.40, at=t + 5000),
    )
    pinot.sync()
    state = s.order_state(order)
    assert (state.status, state.version) == ("BEING_COOKED", 3)
    assert [p.status for p in s.order_status_history(order)] == [
        "PLACED_ORDER",
        "BEING_COOKED",
        "ORDER_CONFIRMED",
    ]  # fmt: skip (ordered by when each status was entered)
    assert [p.version for p in s.courier_path(order)] == [1, 2]
    both = "SELECT COUNT(*) AS n FROM orders_enriched WHERE order_id = %(id)s"
    assert s.query(both, {"id": order}) == [{"n": 1}]
    assert s.query("SET skipUpsert = true; " + both, {"id": order}) == [{"n": 3}]
    assert s.query(both + " OPTION(skipUpsert=true)", {"id": order}) == [{"n": 3}]


def test_the_loader_refuses_a_flush_time_not_below_kafkas_retention():
    table = load_tables()["orders_enriched"]
    settings = loader.Settings(
        controller_url="http://127.0.0.1:1", kafka_bootstrap="k:9092", topic_prefix="",
        kafka_retention_ms=6 * 3600 * 1000, kafka_partitions=3,
    )  # fmt: skip
    with pytest.raises(loader.LoaderError, match=r"flush.threshold.time '6h' is not below"):
        loader.table_config(table, settings)
    ok = dataclasses.replace(settings, kafka_retention_ms=6 * 3600 * 1000 + 1)
    config = loader.table_config(table, ok)
    stream = config["tableIndexConfig"]["streamConfigs"]
    assert stream["stream.kafka.consumer.factory.class.name"] == deployment.CONSUMER_FACTORY
    assert stream["stream.kafka.broker.list"] == "k:9092"


def test_the_loader_names_a_change_pinot_cannot_apply_and_leaves_the_table(real_pinot):
    tables = load_tables()
    table = tables["orders_enriched"]
    retyped = copy.deepcopy(table.schema)
    for spec in retyped["metricFieldSpecs"]:
        if spec["name"] == "total":
            spec["dataType"] = "FLOAT"
    changed = {"orders_enriched": dataclasses.replace(table, schema=retyped)}
    with pytest.raises(loader.LoaderError, match=r"column 'total' changes from"):
        loader.load(real_pinot.settings, changed)
    upsert = copy.deepcopy(table.config)
    upsert["upsertConfig"]["comparisonColumn"] = "event_time"
    changed = {"orders_enriched": dataclasses.replace(table, config=upsert)}
    with pytest.raises(loader.LoaderError, match=r"upsertConfig"):
        loader.load(real_pinot.settings, changed)
    # nothing was applied: the next start with the files finds everything unchanged
    assert {(o.schema, o.config) for o in loader.load(real_pinot.settings)} == {
        ("unchanged", "unchanged")
    }


def test_the_loader_refuses_a_setting_pinot_does_not_keep(real_pinot):
    """Pinot 0.11 ignores keys it does not know (here 1.x's ``comparisonColumns``)."""
    table = load_tables()["orders_enriched"]
    name = f"probe_{uuid.uuid4().hex[:8]}"
    schema = {**copy.deepcopy(table.schema), "schemaName": name}
    config = copy.deepcopy(table.config)
    config["tableName"] = name
    config["segmentsConfig"]["schemaName"] = name
    config["upsertConfig"] = {"mode": "FULL", "comparisonColumns": ["version"]}
    probe = dataclasses.replace(table, name=name, schema=schema, config=config)
    try:
        with pytest.raises(
            loader.LoaderError, match=r"did not keep upsertConfig.comparisonColumns"
        ):
            loader.load(real_pinot.settings, {name: probe})
    finally:
        controller = real_pinot.controller_url
        httpx.delete(f"{controller}/tables/{name}", params={"type": "realtime"}, timeout=60)
        httpx.delete(f"{controller}/schemas/{name}", timeout=60)


def test_a_killed_server_comes_back_from_kafka(real_pinot, pinot):
    """kill -9 the server alone, mid-journey: reads fail (never a wrong answer) until its
    keeper has restarted it, then every row is there again (its consuming segments
    re-read from Kafka), including the status published while it was down."""
    order = pinot.base + 1
    pinot.publish(order_event(order, 1), order_event(order, 2, "ORDER_CONFIRMED"))
    pinot.sync()
    assert s.order_state(order).status == "ORDER_CONFIRMED"
    started = time.monotonic()
    killed = real_pinot.server_pid()
    os.kill(killed, signal.SIGKILL)
    with pytest.raises(TrackingUnavailable):
        s.order_state(order)
    # The monitor's ReplicasMissing figure: the lost server's segments are short of replicas.
    wait_until(lambda: _segments_short() > 0, 60, "the controller to see segments unserved")
    pinot.publish(order_event(order, 3, "BEING_PREPARED"))
    wait_until(
        lambda: s.order_state(order).status == "BEING_PREPARED",
        120 - (time.monotonic() - started),
        "the server to come back, 2 minutes after the kill",
        ignoring=TrackingUnavailable,
    )
    pinot.sync(timeout=30)  # every row again, not only the latest
    assert real_pinot.server_pid() != killed
    wait_until(lambda: _segments_short() == 0, 60, "every segment served again")


def _segments_short() -> int:
    with PinotController() as controller:
        return controller.segments_short()


def test_a_record_of_the_same_version_replaces_the_one_pinot_holds(pinot):
    """A rebuild (``streaming --reprocess``) replays records under the versions a faulty
    run already wrote: on a tie of the comparison column the later record wins, so the
    replay overwrites the wrong state."""
    order = pinot.base + 1
    pinot.publish(order_event(order, 7, "CANCELLED"))
    pinot.sync()
    assert s.order_state(order).status == "CANCELLED"
    pinot.publish(order_event(order, 7, "DELIVERED"))
    pinot.sync()
    assert s.order_state(order).status == "DELIVERED"


def _listening_addresses(port: int) -> set[str]:
    """The local addresses listening on ``port`` (IPv4 and IPv6, from /proc/net)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hexport = local.rsplit(":", 1)
                if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


def test_the_controller_and_broker_listen_on_loopback_only(real_pinot):
    """Pinot binds 0.0.0.0 unless told otherwise: the controller's admin API (tables,
    schemas, segments) must not be on the machine's network in ``make run``."""
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::ffff:127.0.0.1
    for url in (real_pinot.controller_url, real_pinot.broker_url):
        port = int(url.rsplit(":", 1)[1])
        assert _listening_addresses(port) and _listening_addresses(port) <= loopback, url


def test_a_record_pinot_cannot_index_is_dropped_and_the_partition_goes_on(pinot):
    """Pinot 0.11 stores a value past INT wrapped around, with no error: the loader's
    range filter drops it. A record without a required INT, and one that is not JSON,
    are dropped as errors (logged by the server, counted in its ingestion metrics). The
    record after them, on the same partition, is there."""
    past, missing, after = pinot.base + 1, pinot.base + 2, pinot.base + 3
    key = str(after).encode()  # the good record's key: one partition for all four
    wrapped = json.loads(item_event(past, 1, "Cola", 1, 2.0).to_json())
    wrapped["quantity"] = 3 * 10**9
    without = json.loads(item_event(missing, 1, "Cola", 1, 2.0).to_json())
    del without["quantity"]
    topic = topic_name(Topic.ORDER_ITEMS_ENRICHED)
    for value in (json.dumps(wrapped).encode(), json.dumps(without).encode(), b"{not json"):
        pinot.producer.produce(topic, key=key, value=value)
    pinot.publish(item_event(after, 1, "Tiramisu", 1, 5.0))  # same producer: after them
    pinot.sync()
    rows = s.query(
        "SELECT order_id, quantity FROM order_items_enriched "
        f"WHERE order_id IN ({past}, {missing}, {after}) OPTION(skipUpsert=true)"
    )
    assert rows == [{"order_id": after, "quantity": 1}]


def test_a_read_by_order_id_finds_every_order_and_asks_only_its_partitions_segments(
    pinot, real_pinot
):
    """The tables are partitioned by order id as Kafka partitions their topics (Pinot's
    ``Murmur`` over the id's text is the producers' murmur2 over the key), so a read by
    id skips the other partitions' segments. Were the two to disagree, reads would miss
    rows without an error: every one of 60 orders must be found, by ``=`` and by ``IN``."""
    ids = [pinot.base + n for n in range(1, 61)]
    pinot.publish(
        *(order_event(i, 1) for i in ids),
        *(delivery_event(i, 1, 52.5 + n / 1000, 13.4) for n, i in enumerate(ids)),
    )
    pinot.sync()
    for i in ids:
        state = s.order_state(i)
        assert state is not None and state.order_id == i, i
        assert [p.version for p in s.courier_path(i)] == [1], i
    assert set(s.order_states(ids)) == set(ids)

    def stats(sql: str) -> dict:
        answer = httpx.post(f"{real_pinot.broker_url}/query/sql", json={"sql": sql}, timeout=10)
        body = answer.json()
        assert not body.get("exceptions"), body
        return body

    for table in ("orders_enriched", "delivery_statuses"):
        every = stats(f"SELECT COUNT(*) FROM {table}")
        one = stats(f"SELECT COUNT(*) FROM {table} WHERE order_id = {ids[0]}")
        assert one["resultTable"]["rows"] == [[1]]
        assert 0 < one["numSegmentsQueried"] < every["numSegmentsQueried"], (table, one, every)

"""The local Pinot server: table definitions, Pinot semantics, errors, process start-up."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from pinot.definitions import TABLES_DIR, load_tables, validate
from pinot.sql import duration_ms, joda_to_strftime
from tests.fixtures_pinot import REAL_PINOT_URL, delivery_event, order_event
from tracker.core import kafka
from tracker.core.conf import KafkaConfig
from tracker.core.events import ENRICHED_TOPICS, now_ms
from tracker.tracking import selectors as s
from tracker.tracking.exceptions import TrackingUnavailable


def _files(name: str) -> tuple[dict, dict]:
    d = TABLES_DIR / name
    return json.loads((d / "schema.json").read_text()), json.loads((d / "table.json").read_text())


def test_table_definitions_validate_and_cover_the_enriched_topics():
    tables = load_tables()
    assert set(tables) == {"orders_enriched", "delivery_statuses", "order_items_enriched"}
    assert {t.topic for t in tables.values()} == set(ENRICHED_TOPICS)
    orders, deliveries, items = (
        tables["orders_enriched"],
        tables["delivery_statuses"],
        tables["order_items_enriched"],
    )
    assert (orders.upsert, orders.primary_key, orders.comparison_column) == (
        True,
        ("order_id",),
        "version",
    )
    assert (deliveries.upsert, deliveries.comparison_column) == (True, "version")
    assert deliveries.points == {"location": ("lon", "lat")}
    assert (items.dedup, items.upsert, items.primary_key) == (True, False, ("order_id", "line"))
    h3 = deliveries.config["fieldConfigList"][0]
    assert h3["name"] == "location" and "h3" in h3["indexes"]


@pytest.mark.parametrize(
    "mutate, error",
    [
        (
            lambda s, t: s["dimensionFieldSpecs"].append({"name": "nope", "dataType": "LONG"}),
            "'nope' is neither an event field",
        ),
        (lambda s, t: s.update(primaryKeyColumns=[]), "must name primaryKeyColumns"),
        (
            lambda s, t: t["upsertConfig"].update(comparisonColumns=["missing"]),
            "comparison column 'missing'",
        ),
        (
            lambda s, t: t["tableIndexConfig"]["streamConfigs"].update(
                {"stream.kafka.topic.name": "orders-enriched"}
            ),
            "not a topic of the event contract",
        ),
        (lambda s, t: t["routing"].update(instanceSelectorType="balanced"), "strictReplicaGroup"),
    ],
)
def test_validation_rejects_broken_definitions(mutate, error):
    schema, table = (copy.deepcopy(x) for x in _files("orders_enriched"))
    assert validate(schema, table) == []
    mutate(schema, table)
    assert any(error in e for e in validate(schema, table)), validate(schema, table)


def test_duration_and_date_format_translation():
    assert duration_ms("PT1H") == 3_600_000
    assert duration_ms("P7D") == 7 * 86_400_000
    assert duration_ms("PT1M30.5S") == 90_500
    assert joda_to_strftime("yyyy-MM-dd'T'HH:mm:ss.SSS") == "%Y-%m-%dT%H:%M:%S.%g"


def test_pinot_functions_and_types_through_pinotdb(local_pinot):
    base = local_pinot.base
    t = 1_700_000_000_123
    local_pinot.publish(
        *[
            order_event(base + i, 1, created_at=t, status_time=t, total=float(v))
            for i, v in enumerate([4, 1, 3, 2], start=1)
        ]
    )
    local_pinot.sync()
    rows = s.query(
        "SELECT PERCENTILE(total, 50) AS p50, PERCENTILE(total, 100) AS p100, "
        "percentile25(total) AS p25, SUM(total) AS total, COUNT(*) AS n, "
        "DISTINCTCOUNT(status) AS statuses, MAX(total) FILTER (WHERE total < 3) AS m "
        "FROM orders_enriched"
    )
    # Pinot: sorted [1,2,3,4][floor(4*50/100)=2] = 3 (DuckDB quantile_disc says 2)
    assert rows == [
        {"p50": 3.0, "p100": 4.0, "p25": 2.0, "total": 10.0, "n": 4, "statuses": 1, "m": 2.0}
    ]
    rows = s.query(
        "SELECT ToDateTime(created_at, 'yyyy-MM-dd HH:mm:ss.SSS') AS at, "
        "(now() - created_at) / 1000 AS age FROM orders_enriched WHERE order_id = %(o)s "
        "AND created_at < ago('PT1M') LIMIT 1",
        {"o": base + 1},
    )
    assert rows[0]["at"] == "2023-11-14 22:13:20.123"
    assert abs(rows[0]["age"] - (now_ms() - t) / 1000) < 5
    empty = s.query(
        "SELECT SUM(total) AS s, MIN(total) AS lo, AVG(total) AS a, COUNT(*) AS n "
        "FROM orders_enriched WHERE order_id = 0"
    )
    assert empty == [{"s": 0.0, "lo": "Infinity", "a": "-Infinity", "n": 0}]


@pytest.mark.parametrize(
    "sql, code",
    [
        (
            "SELECT * FROM orders_enriched o JOIN delivery_statuses d ON o.order_id = d.order_id",
            700,
        ),
        ("SELECT sqrt(total) AS r FROM orders_enriched", 700),
        ("SELECT * FROM delivery_statuses", 700),
        ("SELECT location FROM delivery_statuses", 700),
        ("SELECT nope FROM orders_enriched", 700),
        ("SELECT x FROM no_such_table", 190),
        ("SELEC x FROM", 150),
        ("SELECT order_id FROM orders_enriched OPTION(useMultistageEngine=true)", 700),
        ("SELECT order_id FROM orders_enriched WHERE order_id IN (SELECT 1)", 700),
        ("SELECT total + 1 FROM orders_enriched", 700),
    ],
)
def test_outside_the_subset_is_a_pinot_error_never_a_silent_answer(local_pinot, sql, code):
    body = httpx.post(f"{local_pinot.url}/query/sql", json={"sql": sql}).json()
    assert body["exceptions"][0]["errorCode"] == code, body
    assert "resultTable" not in body
    with pytest.raises(TrackingUnavailable):
        s.query(sql)


def test_query_options_in_the_request_body(local_pinot):
    oid = local_pinot.base + 1
    local_pinot.publish(order_event(oid, 1), order_event(oid, 2, "ORDER_CONFIRMED"))
    local_pinot.sync()
    sql = f"SELECT COUNT(*) FROM orders_enriched WHERE order_id = {oid}"
    plain = httpx.post(f"{local_pinot.url}/query/sql", json={"sql": sql}).json()
    skip = httpx.post(
        f"{local_pinot.url}/query/sql", json={"sql": sql, "queryOptions": ";skipUpsert=true"}
    ).json()
    assert plain["resultTable"]["rows"] == [[1]] and skip["resultTable"]["rows"] == [[2]]
    assert plain["numServersQueried"] == plain["numServersResponded"] == 1
    assert plain["resultTable"]["dataSchema"] == {
        "columnNames": ["count(*)"],
        "columnDataTypes": ["LONG"],
    }


def test_broker_restart_refills_topics_and_the_server_rereads_them(monkeypatch):
    """Embedded broker restart: topics come back empty and are refilled from offset 0.

    The refill differs from what was consumed (new event ids, an extra order), so
    continuing at the old offsets would silently skip records.
    """
    if REAL_PINOT_URL:
        pytest.skip("broker restarts are an embedded-mode concern")
    import socket

    from pinot.server import LocalPinot
    from tests.fixtures_pinot import PinotHarness
    from tracker.core.broker import EmbeddedBroker

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "restart.")
    broker = EmbeddedBroker(KafkaConfig(), log_path=None).start()
    server = LocalPinot(port=0).start()
    monkeypatch.setenv("PINOT_BROKER_URL", server.url)
    try:
        harness = PinotHarness(server.url, server)
        harness.publish(*[order_event(1, v) for v in (1, 2, 3)])
        harness.sync()
        broker.stop()
        broker = EmbeddedBroker(KafkaConfig(), log_path=None).start()
        harness.producer = kafka.producer()
        # the replay: order 2 first, then order 1 again (new event ids), then its next version
        harness.publish(order_event(2, 1), *[order_event(1, v) for v in (1, 2, 3, 4)])
        harness.sync()
        assert s.order_state(1).version == 4
        assert s.order_state(2).version == 1
        history = s.query(
            "SELECT version FROM orders_enriched WHERE order_id = 1 ORDER BY version LIMIT 10 "
            "OPTION(skipUpsert=true)"
        )
        assert [r["version"] for r in history] == [1, 2, 3, 4]
        assert server.ingester.stats["resets"] >= 1
        del harness.producer
    finally:
        server.stop()
        broker.stop()


def test_python_m_pinot_prints_ready_and_serves_health(kafka_topics, tmp_path):
    if REAL_PINOT_URL:
        pytest.skip("local server start-up does not apply when PINOT_BROKER_URL is set")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PINOT_LOCAL_PORT": str(port), "PINOT_LOCAL_DB": str(tmp_path / "p.db")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pinot"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert "pinot: ready" in line
        assert httpx.get(f"http://127.0.0.1:{port}/health").text == "OK"
        prod = kafka.producer()
        kafka.publish(prod, delivery_event(42, 1, 52.5, 13.4))
        prod.flush(10)
        os.environ["PINOT_BROKER_URL"] = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 10
            while not s.courier_path(42):
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            del os.environ["PINOT_BROKER_URL"]
        debug = httpx.get(f"http://127.0.0.1:{port}/debug/ingestion").json()
        assert debug["rows"]["delivery_statuses"] == 1
    finally:
        proc.terminate()
        assert proc.wait(10) == 0

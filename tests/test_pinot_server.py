"""The local Pinot server: table definitions, Pinot semantics, errors, process start-up."""

from __future__ import annotations

import concurrent.futures
import copy
import json
import logging
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from contract import kafka
from contract.events import ENRICHED_TOPICS, now_ms
from contract.kafka import ensure_topics
from pinot.definitions import TABLES_DIR, load_tables, validate
from pinot.sql import Translator, duration_ms, joda_to_strftime, translate
from tests.fixtures_pinot import REAL_PINOT_URL, delivery_event, order_event
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
    assert (h3["name"], h3["indexType"], h3["properties"]["resolutions"]) == (
        "location",
        "H3",
        "13,5,6",
    )


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


#: Queries of one shape whose literals differ in value (and in how the translator uses
#: them: copied, named, or deciding the plan): (template, values of {a}, values of {b}).
SAME_SHAPE = [
    ("SELECT {cols} FROM orders_enriched WHERE order_id = {a} LIMIT 1", ("7", "123456")),
    ("SET skipUpsert = true; SELECT order_id, lat FROM delivery_statuses "
     "WHERE order_id = {a} ORDER BY version LIMIT 1000", ("2", "99")),
    ("SELECT order_id FROM orders_enriched WHERE customer_name = {a} AND total > 2.5 "
     "LIMIT 20 OFFSET {b}", ("'O''Brien'", "'x'"), ("0", "40")),
    ("SELECT SUM(total) FILTER (WHERE total > {a}) FROM orders_enriched", ("2.5", "2.75")),
    ("SELECT MAX(total) FILTER (WHERE status = {a}) FROM orders_enriched", ("'DELIVERED'", "'X'")),
    ("SELECT \"order_id\", total + {a} AS t FROM orders_enriched WHERE order_id IN ({b}, 2) "
     "LIMIT 5", ("1", "-3"), ("10", "11")),
    ("SELECT status, PERCENTILE((now() - status_time) / 1000, {a}) AS p FROM orders_enriched "
     "GROUP BY status LIMIT 10", ("50", "99")),
    ("SELECT COUNT(*) FILTER (WHERE created_at > ago({a})) AS n FROM orders_enriched "
     "WHERE created_at > ago('P14D')", ("'PT1H'", "'P7D'")),
    ("SELECT order_id FROM delivery_statuses WHERE ST_Contains(ST_GeogFromText({a}), "
     "location) = 1 LIMIT 5", ("'POLYGON((0 0, 1 0, 1 1, 0 0))'", "'POLYGON((0 0, 2 0, 2 2, 0 0))'")),
    ("SELECT ToDateTime(created_at, {a}) AS at FROM orders_enriched LIMIT 1",
     ("'yyyy-MM-dd'", "'HH:mm'")),
]  # fmt: skip


@pytest.mark.parametrize("case", SAME_SHAPE, ids=lambda c: c[0][:40])
def test_a_query_shape_translated_once_answers_each_query_as_a_fresh_translation(case):
    template, a, b = (*case, ("1", "1"))[:3]
    tables = load_tables()
    translator = Translator(tables)
    for i in range(2):
        sql = template.format(cols=s.ORDER_COLUMNS, a=a[i], b=b[i])
        for now in (1_700_000_000_000, 1_800_000_000_123):
            assert translator.translate(sql, None, now) == translate(sql, None, tables, now)


def test_a_prepared_point_lookup_answers_like_the_query_it_stands_for(local_pinot):
    """``= <integer>`` lookups run as prepared statements; they see what is ingested after
    they were prepared, and a lookup of nothing answers nothing."""
    base = local_pinot.base
    sql = "SELECT status, version FROM orders_enriched WHERE order_id = %(o)s LIMIT 1"
    plan = local_pinot.server.translator.translate(sql % {"o": base + 1}, None, now_ms())
    assert plan.prepared is not None and plan.prepared[1] == (base + 1,)
    local_pinot.publish(order_event(base + 1, 1))
    local_pinot.sync()
    for _ in range(3):  # the first prepares, the next ones execute (on whichever cursor)
        assert s.query(sql, {"o": base + 1}) == [{"status": "PLACED_ORDER", "version": 1}]
        assert s.query(sql, {"o": base + 2}) == []
    local_pinot.publish(order_event(base + 1, 2, "ORDER_CONFIRMED"), order_event(base + 2, 1))
    local_pinot.sync()
    assert s.query(sql, {"o": base + 1}) == [{"status": "ORDER_CONFIRMED", "version": 2}]
    assert s.query(sql, {"o": base + 2}) == [{"status": "PLACED_ORDER", "version": 1}]


def test_a_burst_of_new_connections_is_answered_not_reset(local_pinot):
    """Fresh web workers open many connections at once; every one of them gets its answer
    (a short accept queue resets the overflow: an HTTP 503 for each of those users)."""
    url = f"{local_pinot.server.url}/query/sql"
    body = {"sql": "SELECT COUNT(*) FROM orders_enriched"}
    start = threading.Barrier(200)

    def ask(_: int) -> int:
        with httpx.Client(timeout=30) as client:  # a new connection per caller
            start.wait()
            return client.post(url, json=body).status_code

    with concurrent.futures.ThreadPoolExecutor(200) as pool:
        statuses = list(pool.map(ask, range(200)))
    assert statuses == [200] * 200


def test_slow_queries_are_logged_with_their_sql_and_time_split(local_pinot, caplog):
    local_pinot.server.slow_query_ms = 0  # every query counts as slow
    with caplog.at_level(logging.WARNING, logger="embedded.pinot_server"):
        s.query("SELECT COUNT(*) AS n FROM orders_enriched WHERE order_id = %(o)s", {"o": 7})
    (line,) = [r.getMessage() for r in caplog.records if "slow query" in r.getMessage()]
    assert "translate" in line and "execute" in line
    assert "FROM orders_enriched WHERE order_id = 7" in line


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
        ("SELECT SUM(total) FILTER (WHERE total > 1) FROM orders_enriched", 700),  # 1 -> 1.0
        ("SELECT COUNT(*) FILTER (WHERE total > 1.5 AND total < 3.5) FROM orders_enriched", 700),
        ("SELECT MAX(total) FILTER (WHERE NOT status = 'X') FROM orders_enriched", 700),
        ("SELECT now() FROM orders_enriched", 700),
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


def test_broker_restart_refills_topics_and_the_server_rereads_them(
    kafka_broker, monkeypatch, tmp_path
):
    """Embedded broker restart: topics come back empty and are refilled from offset 0.

    The refill differs from what was consumed (new event ids, an extra order), so
    continuing at the old offsets would silently skip records.
    """
    if REAL_PINOT_URL:
        pytest.skip("broker restarts are an embedded-mode concern")
    from embedded.kafka import free_port
    from embedded.pinot_server import LocalPinot
    from tests.engines import start_kafka
    from tests.fixtures_pinot import PinotHarness

    port = free_port()
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "restart.")
    broker = start_kafka(tmp_path / "first", port=port, log_name="test-kafka-restart.log")
    ensure_topics()
    server = LocalPinot(port=0).start()
    monkeypatch.setenv("PINOT_BROKER_URL", server.url)
    try:
        harness = PinotHarness(server.url, server)
        harness.publish(*[order_event(1, v) for v in (1, 2, 3)])
        harness.sync()
        broker.kill()  # and its disk: a new, empty node on the same address
        broker = start_kafka(tmp_path / "second", port=port, log_name="test-kafka-restart.log")
        ensure_topics()
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


def test_a_record_the_store_cannot_hold_is_skipped_counted_and_passed(local_pinot, caplog):
    """The poison pills of the enriched topics: a quantity past Pinot's INT (which once made
    the stand-in retry its batch forever), a lone surrogate that has no UTF-8 form (fails
    the whole batch at write time), random bytes. Each is skipped, counted by reason and
    logged; the valid records around them, in the same batch, are stored."""
    from tests.fixtures_pinot import item_event

    base = local_pinot.base
    before = item_event(base + 1, 1, "Margherita", 2, 8.5)
    too_many = json.loads(item_event(base + 2, 1, "Cola", 1, 2.0).to_json())
    too_many["quantity"] = 3_000_000_000
    surrogate = json.loads(order_event(base + 3, 1).to_json())
    surrogate["customer_name"] = "Ada \ud800"
    after = [item_event(base + 4, 1, "Tiramisu", 1, 5.0), order_event(base + 5, 1)]
    prod = local_pinot.producer
    kafka.publish(prod, before)
    for topic, body in (
        ("order_items_enriched", json.dumps(too_many).encode()),
        ("orders_enriched", json.dumps(surrogate).encode()),
        ("orders_enriched", b"\xff\x00 not json"),
    ):
        prod.produce(kafka.topic_name(topic), key=b"1", value=body)
    local_pinot.publish(*after)
    with caplog.at_level(logging.WARNING, logger="pinot.ingest"):
        local_pinot.server.ingester.wait_caught_up(30)
    stored = s.query(
        f"SELECT order_id FROM order_items_enriched WHERE order_id > {base} ORDER BY order_id"
    )
    assert [r["order_id"] for r in stored] == [base + 1, base + 4]
    assert s.order_state(base + 5).version == 1
    assert s.order_state(base + 3) is None
    skipped = local_pinot.server.ingester.skipped
    assert skipped["quantity: does not fit INT"] == 1
    assert skipped["UnicodeEncodeError"] == 1
    assert skipped["JSONDecodeError"] + skipped["UnicodeDecodeError"] == 1
    assert sum(skipped.values()) == 3 == local_pinot.server.ingester.stats["dropped"]
    assert "skipping" in caplog.text and "does not fit INT" in caplog.text


def test_python_m_pinot_prints_ready_and_serves_health(kafka_topics, tmp_path):
    if REAL_PINOT_URL:
        pytest.skip("local server start-up does not apply when PINOT_BROKER_URL is set")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PINOT_LOCAL_PORT": str(port), "PINOT_LOCAL_DB": str(tmp_path / "p.db")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "embedded.pinot_server"], env=env, stdout=subprocess.PIPE, text=True
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


#: Unaliased expressions and the column names Pinot's broker gives them
#: (``ExpressionContext.toString`` / ``AggregationFunction.getResultColumnName``).
BROKER_NAMES = [
    ("COUNT(*)", "count(*)", "LONG", 4),
    ("count(order_id)", "count(*)", "LONG", 4),
    ("SUM(total)", "sum(total)", "DOUBLE", 10.0),
    ("MIN(total)", "min(total)", "DOUBLE", 1.0),
    ("MAX(total)", "max(total)", "DOUBLE", 4.0),
    ("AVG(total)", "avg(total)", "DOUBLE", 2.5),
    ("MINMAXRANGE(total)", "minmaxrange(total)", "DOUBLE", 3.0),
    ("DISTINCTCOUNT(status)", "distinctcount(status)", "INT", 1),
    ("COUNT(DISTINCT status)", "distinctcount(status)", "INT", 1),
    ("DISTINCTCOUNTBITMAP(status)", "distinctcountbitmap(status)", "INT", 1),
    ("DISTINCTCOUNTHLL(order_id)", "distinctcounthll(order_id)", "LONG", 4),
    ("PERCENTILE(total, 90)", "percentile(total, 90.0)", "DOUBLE", 4.0),
    ("percentile(total, 50.5)", "percentile(total, 50.5)", "DOUBLE", 3.0),
    ("PERCENTILE90(total)", "percentile90(total)", "DOUBLE", 4.0),
    ("PERCENTILEEST(total, 50)", "percentileest(total, 50.0)", "LONG", 3),
    ("PERCENTILETDIGEST(total, 50)", "percentiletdigest(total, 50.0)", "DOUBLE", 3.0),
    ("SUM(total * 2)", "sum(times(total,'2'))", "DOUBLE", 20.0),
    ("MAX((total - 1) / 2)", "max(divide(minus(total,'1'),'2'))", "DOUBLE", 1.5),
    (
        "COUNT(*) FILTER (WHERE total > 2.5)",
        "count(*) FILTER(WHERE total > '2.5')",
        "LONG",
        2,
    ),
    (
        "SUM(total) FILTER (WHERE status = 'PLACED_ORDER' AND version >= 1)",
        "sum(total) FILTER(WHERE (status = 'PLACED_ORDER' AND version >= '1'))",
        "DOUBLE",
        10.0,
    ),
    (
        "AVG(total) FILTER (WHERE version BETWEEN 1 AND 3)",
        "avg(total) FILTER(WHERE version BETWEEN '1' AND '3')",
        "DOUBLE",
        2.5,
    ),
]


@pytest.mark.parametrize("expression, name, data_type, value", BROKER_NAMES)
def test_every_aggregate_form_is_named_like_pinots_broker_unaliased_and_aliased(
    local_pinot, expression, name, data_type, value
):
    base = local_pinot.base
    local_pinot.publish(
        *[order_event(base + i, 1, total=float(v)) for i, v in enumerate([4, 1, 3, 2], 1)]
    )
    local_pinot.sync()

    def ask(sql: str) -> dict:
        body = httpx.post(f"{local_pinot.url}/query/sql", json={"sql": sql}).json()
        assert "exceptions" not in body or not body["exceptions"], body
        return body["resultTable"]

    where = f"WHERE order_id BETWEEN {base + 1} AND {base + 4}"
    plain = ask(f"SELECT {expression} FROM orders_enriched {where}")
    assert plain["dataSchema"] == {"columnNames": [name], "columnDataTypes": [data_type]}
    assert plain["rows"] == [[value]]
    aliased = ask(f"SELECT {expression} AS x FROM orders_enriched {where}")
    assert aliased["dataSchema"]["columnNames"] == ["x"] and aliased["rows"] == [[value]]
    grouped = ask(
        f"SELECT status, {expression} FROM orders_enriched {where} "
        f"GROUP BY status ORDER BY {expression} DESC LIMIT 5"
    )
    assert grouped["dataSchema"]["columnNames"] == ["status", name]
    assert grouped["rows"] == [["PLACED_ORDER", value]]


def test_unaliased_transforms_are_named_after_pinots_expression_tree(local_pinot):
    oid = local_pinot.base + 1
    local_pinot.publish(order_event(oid, 1, total=5.0))
    local_pinot.sync()
    body = httpx.post(
        f"{local_pinot.url}/query/sql",
        json={"sql": f"SELECT total + 1, FLOOR(total / 2) FROM orders_enriched "
              f"WHERE order_id = {oid} LIMIT 1"},
    ).json()  # fmt: skip
    assert body["resultTable"]["dataSchema"]["columnNames"] == [
        "plus(total,'1')",
        "floor(divide(total,'2'))",
    ]
    assert body["resultTable"]["rows"] == [[6.0, 2.0]]


def test_a_database_file_with_a_dropped_column_still_ingests(tmp_path):
    """An embedded install keeps its DuckDB file across upgrades, as Pinot keeps a live
    table's columns: a column the schema has since dropped (the retired eta_seconds) gets
    NULL, and the rows the current schema describes land in their own columns."""
    from pinot.store import Batch, Store, history_table, to_row

    tables = load_tables()
    table = tables["delivery_statuses"]
    path = str(tmp_path / "pinot.duckdb")
    old = Store(tables, path)
    for name in (table.name, history_table(table.name)):
        old.conn.execute(f'ALTER TABLE "{name}" ADD COLUMN eta_seconds BIGINT')
    old.close()
    store = Store(tables, path)
    try:
        event = delivery_event(901, 2, 52.52, 13.40, courier_id=7)
        record = json.loads(event.to_json())
        store.apply([Batch(table, [to_row(table, record)], [False])], {})
        for name in (table.name, history_table(table.name)):
            rows = store.conn.execute(
                f'SELECT order_id, version, lat, distance_left_km, eta_seconds FROM "{name}"'
            ).fetchall()
            assert rows == [(901, 2, 52.52, 1.5, None)], name
    finally:
        store.close()


def test_upserts_beside_an_open_query_still_checkpoint_the_database_file(tmp_path, monkeypatch):
    """Queries run beside nearly every write of the stand-in. DuckDB skips its automatic
    checkpoint at a commit that updated rows while another transaction is open, so an
    upsert written as an in-place update let the write-ahead log (and the memory behind
    it) grow for as long as the process ran. Upserts replace rows by delete and insert:
    the log is checkpointed into the file while a query stays open, and the current rows
    still follow the upsert rule."""
    from pinot.store import DUCKDB_CONFIG, Batch, Store, history_table, to_row

    monkeypatch.setitem(DUCKDB_CONFIG, "checkpoint_threshold", "256KB")
    tables = load_tables()
    table = tables["orders_enriched"]
    path = tmp_path / "pinot.duckdb"
    store = Store(tables, str(path))
    keys, versions = 100, 60
    try:
        open_query = store.conn.cursor()
        open_query.execute("BEGIN TRANSACTION")
        open_query.execute(f'SELECT count(*) FROM "{table.name}"').fetchall()
        created = now_ms() - 60_000
        for version in range(1, versions + 1):
            rows = [
                to_row(table, json.loads(order_event(i, version, created_at=created).to_json()))
                for i in range(keys)
            ]
            # An older record after the newer one: it must not replace the current row.
            rows.append(to_row(table, json.loads(order_event(0, version - 1).to_json())))
            store.apply([Batch(table, rows, [False] * len(rows))], {("orders", 0): (version, None)})
        wal = path.with_name(path.name + ".wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        assert wal_bytes < 1 << 20, f"write-ahead log {wal_bytes} bytes: never checkpointed"
        assert path.stat().st_size > 256 * 1024, "nothing was checkpointed into the file"
        # The open transaction still sees the database as it began.
        assert open_query.execute(f'SELECT count(*) FROM "{table.name}"').fetchall() == [(0,)]
        open_query.execute("COMMIT")
        current = store.read(f'SELECT count(*), min(version), max(version) FROM "{table.name}"')
        assert current == [(keys, versions, versions)]
        history = store.read(f'SELECT count(*) FROM "{history_table(table.name)}"')
        assert history == [(versions * (keys + 1),)]
        assert store.load_offsets() == {("orders", 0): (versions, None)}
    finally:
        store.close()

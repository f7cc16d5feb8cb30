"""The local Pinot server (embedded mode): broker query API over DuckDB.

Serves ``POST /query/sql`` with the JSON shape of Pinot's broker (what pinotdb
parses), ``GET /health`` ("OK" once the tables exist), ``GET /debug/ingestion``
(offsets, lag, row counts) and ``GET /metrics`` (the same figures for Prometheus). It reads the table definitions from ``pinot/tables``,
consumes the topics they name and keeps Pinot's semantics for the supported SQL
subset (see :mod:`pinot.sql`); everything else gets a Pinot-style error.

Run: ``python -m embedded.pinot_server`` (prints ``pinot: ready on http://HOST:PORT`` when serving).
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import duckdb
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from contract.conf import KafkaConfig, env_int, env_str, var_dir
from pinot.definitions import TABLES_DIR, load_tables
from pinot.ingest import Ingester
from pinot.sql import QUERY_EXECUTION_ERROR, QueryError, Translator
from pinot.store import Store

log = logging.getLogger(__name__)

#: Largest request body accepted (a query, not a bulk upload).
MAX_BODY = 1 << 20

#: Host names the server answers to (any port) besides the one it listens on. Anything
#: else is refused, so a web page whose DNS name is rebound to 127.0.0.1 cannot read it.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def allowed_hosts(bind_host: str) -> frozenset[str]:
    extra = env_str("PINOT_LOCAL_ALLOWED_HOSTS", "")
    names = {*LOOPBACK_HOSTS, bind_host, *(h.strip() for h in extra.split(",") if h.strip())}
    return frozenset(n.lower() for n in names if n not in ("", "0.0.0.0", "::"))


def host_name(header: str | None) -> str | None:
    """``Host`` without its port (``[::1]:8099`` -> ``[::1]``); None when absent."""
    if not header:
        return None
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class BrokerHTTPServer(ThreadingHTTPServer):
    """The stdlib server with a broker-sized accept queue.

    socketserver listens with a backlog of 5: when a web tier opens more connections than
    that at once (a burst of requests on fresh workers), the kernel resets the rest and
    each of those reads fails with "connection reset by peer" (an HTTP 503 for the user).
    The kernel caps the value at ``net.core.somaxconn``.
    """

    request_queue_size = 1024
    daemon_threads = True


def _json_value(value: Any) -> Any:
    """Pinot (Jackson) writes non-finite doubles as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


class IngestionCollector:
    """The ingester's figures at scrape time: lag and delay per table, records consumed
    and skipped (its ``stats``, the counts ``/debug/ingestion`` shows)."""

    def __init__(self, server: LocalPinot) -> None:
        self.server = server

    def collect(self):
        ingester = self.server.ingester
        lag_records = GaugeMetricFamily(
            "ordertrack_pinot_ingestion_lag_records",
            "Records in each table's topic not ingested yet",
            labels=["table"],
        )
        delay = GaugeMetricFamily(
            "ordertrack_pinot_ingestion_delay_seconds",
            "Age of the newest record ingested while records wait (0 when caught up)",
            labels=["table"],
        )
        try:
            lag = ingester.lag()
        except Exception:  # noqa: BLE001 - broker down: no lag figures, the rest still
            lag = {}
        now = time.time() * 1000
        for topic, table in sorted(ingester.by_topic.items()):
            if topic not in lag:
                continue
            lag_records.add_metric([table.name], lag[topic])
            newest = ingester.newest_ms.get(topic)
            waited = (now - newest) / 1000 if lag[topic] and newest else 0.0
            delay.add_metric([table.name], max(0.0, waited))
        yield lag_records
        yield delay
        yield CounterMetricFamily(
            "ordertrack_pinot_records_consumed",
            "Records read from the tables' topics",
            ingester.stats["consumed"],
        )
        skipped = CounterMetricFamily(
            "ordertrack_pinot_records_skipped",
            "Records the store could not take, by reason",
            labels=["reason"],
        )
        for reason, count in sorted(ingester.skipped.items()):
            skipped.add_metric([reason], count)
        yield skipped


class LocalPinot:
    """Store + ingester + HTTP server in one object (tests run it in-process)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8099,
        db_path: str = ":memory:",
        config: KafkaConfig | None = None,
        tables_dir: Path = TABLES_DIR,
        retention_ms: int | None = None,
        memory_limit: str | None = None,
    ) -> None:
        self.tables = load_tables(tables_dir)
        self.store = Store(self.tables, db_path, memory_limit=memory_limit)
        self.translator = Translator(self.tables)
        self.config = config or KafkaConfig()
        self.ingester = Ingester(self.store, self.config, retention_ms=retention_ms)
        self.allowed_hosts = allowed_hosts(host)
        self.metrics = CollectorRegistry()
        self.metrics.register(IngestionCollector(self))
        #: Queries at least this slow are logged with their SQL (Pinot's broker does too).
        self.slow_query_ms = env_int("PINOT_LOCAL_SLOW_QUERY_MS", 1000)
        self.httpd = BrokerHTTPServer((host, port), _handler_for(self))
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="pinot-http", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LocalPinot:
        self.ingester.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.ingester.stop()
        self.store.close()

    def query(self, sql: str, query_options: str | None = None) -> dict[str, Any]:
        """Execute one broker request; always returns a Pinot response body."""
        started = time.perf_counter()
        now_ms = int(time.time() * 1000)
        body: dict[str, Any] = {
            "exceptions": [],
            "numServersQueried": 1,
            "numServersResponded": 1,
            "numSegmentsQueried": 1,
            "numSegmentsProcessed": 1,
            "numSegmentsMatched": 1,
            "numConsumingSegmentsQueried": 1,
            "numDocsScanned": 0,
            "totalDocs": 0,
            "numGroupsLimitReached": False,
            "requestId": uuid.uuid4().int & ((1 << 63) - 1),
            "brokerId": "local-pinot",
        }
        translated = executed = started
        try:
            plan = self.translator.translate(sql, query_options, now_ms)
            translated = time.perf_counter()
            try:
                rows = self.store.read(plan.sql, plan.prepared)
            except duckdb.Error as exc:
                raise QueryError(QUERY_EXECUTION_ERROR, str(exc).splitlines()[0]) from None
            executed = time.perf_counter()
            body["resultTable"] = {
                "dataSchema": {
                    "columnNames": plan.column_names,
                    "columnDataTypes": plan.column_types,
                },
                "rows": [[_json_value(v) for v in row] for row in rows],
            }
            body["numRowsResultSet"] = len(rows)
            body["numDocsScanned"] = len(rows)
        except QueryError as exc:
            body.update(numServersQueried=0, numServersResponded=0, numSegmentsQueried=0)
            body["exceptions"] = [{"errorCode": exc.code, "message": str(exc)}]
        body["timeUsedMs"] = round((time.perf_counter() - started) * 1000)
        if body["timeUsedMs"] >= self.slow_query_ms:
            log.warning(
                "slow query: %d ms (translate %.0f, execute %.0f, %d rows): %.300s",
                body["timeUsedMs"],
                (translated - started) * 1000,
                (executed - translated) * 1000 if executed > started else -1,
                body.get("numRowsResultSet", 0),
                sql,
            )
        return body


def _handler_for(server: LocalPinot) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # Without this the stdlib server adds ~50 ms per response (Nagle + delayed ACK).
        disable_nagle_algorithm = True
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, status: int, payload: Any, content_type: str = "application/json"):
            data = (
                payload.encode()
                if isinstance(payload, str)
                else json.dumps(payload, separators=(",", ":")).encode()
            )
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _host_allowed(self) -> bool:
            """Refuse a Host we do not serve (DNS rebinding: evil.example -> 127.0.0.1)."""
            if host_name(self.headers.get("Host")) in server.allowed_hosts:
                return True
            self.close_connection = True
            self._send(403, {"code": 403, "error": "host not allowed"})
            return False

        def do_GET(self) -> None:  # noqa: N802 (stdlib API)
            if not self._host_allowed():
                return
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, "OK", "text/plain")
            elif path == "/metrics":
                self._send(200, generate_latest(server.metrics).decode(), CONTENT_TYPE_LATEST)
            elif path == "/debug/ingestion":
                try:
                    lag: Any = server.ingester.lag()
                except Exception as exc:  # broker down: report, do not fail
                    lag = repr(exc)
                self._send(
                    200,
                    {
                        "tables": sorted(server.tables),
                        "topicPrefix": server.config.topic_prefix,
                        "offsets": {
                            f"{t}[{p}]": n for (t, p), (n, _) in server.ingester.positions.items()
                        },
                        "lag": lag,
                        "rows": server.store.counts(),
                        "stats": server.ingester.stats,
                        "lastError": server.ingester.last_error,
                    },
                )
            else:
                self._send(404, {"error": f"no route {path}"})

        def do_POST(self) -> None:  # noqa: N802
            if not self._host_allowed():
                return
            path = self.path.split("?", 1)[0]
            if path not in ("/query/sql", "/query"):
                self._send(404, {"error": f"no route {path}"})
                return
            raw_length = self.headers.get("Content-Length")
            # Missing, negative or malformed: refuse without reading (rfile.read(-1) would
            # wait for the client to close the connection). The connection is then closed,
            # since whatever body follows was not consumed.
            if raw_length is None or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                self._send(411, {"code": 411, "error": "Content-Length required"})
                return
            try:
                length = int(raw_length)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                self._send(400, {"code": 400, "error": "bad Content-Length"})
                return
            if length > MAX_BODY:
                self.close_connection = True
                self._send(413, {"error": "request too large"})
                return
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
                sql = request["sql"]
                if not isinstance(sql, str):
                    raise TypeError("sql must be a string")
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"code": 400, "error": f"bad request: {exc}"})
                return
            self._send(200, server.query(sql, request.get("queryOptions")))

    return Handler


def main() -> int:
    """Entry point of ``python -m embedded.pinot_server``: serve until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=env_str("PINOT_LOCAL_LOG_LEVEL", "INFO"),
        format="%(asctime)s pinot %(levelname)s %(message)s",
    )
    db = env_str("PINOT_LOCAL_DB", str(var_dir() / "pinot" / "pinot.duckdb"))
    if db != ":memory:":
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    retention_days = env_int("PINOT_LOCAL_RETENTION_DAYS", 30)
    server = LocalPinot(
        host=env_str("PINOT_LOCAL_HOST", "127.0.0.1"),
        port=env_int("PINOT_LOCAL_PORT", 8099),
        db_path=db,
        retention_ms=retention_days * 86_400_000 if retention_days > 0 else None,
        memory_limit=env_str("PINOT_LOCAL_MEMORY_LIMIT", "512MB"),
    ).start()
    print(
        f"pinot: ready on {server.url} (topics prefix {server.config.topic_prefix!r})", flush=True
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

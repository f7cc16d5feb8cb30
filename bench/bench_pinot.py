"""Benchmark of the serving layer: local Pinot ingest rate and tracking-query latency.

Starts its own Apache Kafka node on a free port, produces ``--orders``
orders worth of enriched events (3 versions per order, 2 item lines, 5 courier
points for every 5th order), then starts the local Pinot server, measures how
fast it ingests everything, and times each named selector in
``tracker.tracking.selectors`` through pinotdb (HTTP), reporting p50/p99.

Not a test. Usage::

    .venv/bin/python bench/bench_pinot.py [--orders 100000] [--iterations 100] [--db PATH]

Prints a table and writes JSON to bench/results/pinot-<timestamp>.json.
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import arguments, start_kafka  # noqa: E402
from contract import kafka  # noqa: E402
from contract.events import now_ms  # noqa: E402
from embedded.pinot_server import LocalPinot  # noqa: E402
from tests.fixtures_pinot import delivery_event, item_event, order_event  # noqa: E402
from tracker.tracking import selectors as s  # noqa: E402

STATUSES = ["PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED",
            "OUT_FOR_DELIVERY", "ARRIVING_AT_DOOR", "DELIVERED"]  # fmt: skip
CUSTOMERS, RESTAURANTS = 5000, 50
DISHES = ["Margherita", "Marinara", "Diavola", "Calzone", "Tiramisu", "Cola", "Salad", "Fries"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def produce(orders: int, rng: random.Random) -> int:
    """Publish the data set; returns the number of records."""
    sent = kafka.Deliveries(kafka.producer(**{"linger.ms": 20, "batch.num.messages": 10_000}))
    now = now_ms()
    count = 0
    for oid in range(1, orders + 1):
        created = now - rng.randrange(0, 8 * 86_400_000)
        cust, rest = rng.randrange(1, CUSTOMERS), rng.randrange(1, RESTAURANTS)
        final = rng.randrange(0, len(STATUSES))
        steps = sorted({0, max(0, final - 1), final})
        at = created
        for version, step in enumerate(steps, start=1):
            at = created + step * 60_000
            times = {STATUSES[i]: created + i * 60_000 for i in range(step + 1)}
            sent.publish(
                order_event(oid, version, STATUSES[step], customer_id=cust, restaurant_id=rest,
                            created_at=created, status_time=at, status_times=times,
                            total=round(rng.uniform(8, 80), 2)),
            )  # fmt: skip
            count += 1
        for line in (1, 2):
            sent.publish(
                item_event(oid, line, rng.choice(DISHES), rng.randrange(1, 4), 7.5,
                           restaurant_id=rest, at=created),
            )  # fmt: skip
            count += 1
        if oid % 5 == 0:
            for v in range(1, 6):
                sent.publish(
                    delivery_event(oid, v, 52.5 + rng.random() / 10, 13.4 + rng.random() / 10,
                                   at=at + v * 1000, restaurant_id=rest),
                )  # fmt: skip
                count += 1
        if oid % 10_000 == 0:
            sent.producer.poll(0)
    sent.flush(60)
    return count


def timed(fn, iterations: int) -> dict[str, float]:
    fn()  # warm-up (connection, caches)
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 2),
        "max_ms": round(samples[-1], 2),
    }


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--db", default=None, help="DuckDB file (default: a temp file)")
    args = parser.parse_args()
    rng = random.Random(42)

    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{free_port()}"
    os.environ["KAFKA_TOPIC_PREFIX"] = "bench."
    tmp = tempfile.TemporaryDirectory()
    broker = start_kafka(Path(tmp.name))
    db = args.db or str(Path(tmp.name) / "bench.duckdb")
    server = None
    try:
        t0 = time.perf_counter()
        records = produce(args.orders, rng)
        produce_s = time.perf_counter() - t0
        print(f"produced {records} records in {produce_s:.1f} s", flush=True)

        t0 = time.perf_counter()
        server = LocalPinot(port=0, db_path=db).start()
        server.ingester.wait_caught_up(timeout=900)
        ingest_s = time.perf_counter() - t0
        print(f"ingested in {ingest_s:.1f} s ({records / ingest_s:,.0f} records/s)", flush=True)
        os.environ["PINOT_BROKER_URL"] = server.url

        box = [(13.42, 52.52), (13.46, 52.52), (13.46, 52.56), (13.42, 52.56)]
        queries = {
            "customer_orders": lambda: s.list_orders(
                customer_id=rng.randrange(1, CUSTOMERS), limit=20
            ),
            "customer_orders_active": lambda: s.list_orders(
                customer_id=rng.randrange(1, CUSTOMERS), state="active"
            ),
            "order_state": lambda: s.order_state(rng.randrange(1, args.orders)),
            "order_status_history": lambda: s.order_status_history(rng.randrange(1, args.orders)),
            "courier_path": lambda: s.courier_path(5 * rng.randrange(1, args.orders // 5)),
            "time_in_status_percentiles": lambda: s.time_in_status_percentiles(),
            "stuck_orders": lambda: s.stuck_orders(10 * 60_000, status="BEING_COOKED"),
            "deliveries_in_area": lambda: s.deliveries_in_area(box),
            "restaurant_dashboard_all": lambda: s.restaurant_dashboard(),
            "restaurant_dashboard_one": lambda: s.restaurant_dashboard(
                rng.randrange(1, RESTAURANTS)
            ),
        }
        results = {}
        for name, fn in queries.items():
            results[name] = timed(fn, args.iterations)
        rows = server.store.counts()
    finally:
        if server is not None:
            server.stop()
        broker.stop()
        tmp.cleanup()

    print(f"\n{'query':32} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, r in results.items():
        print(f"{name:32} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f}")
    report = {
        "orders": args.orders,
        "records": records,
        "produce_seconds": round(produce_s, 2),
        "ingest_seconds": round(ingest_s, 2),
        "ingest_records_per_second": round(records / ingest_s),
        "rows": rows,
        "iterations": args.iterations,
        "queries": results,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }
    out = ROOT / "bench" / "results" / f"pinot-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""API latency under concurrency: order detail, my orders, time-in-status percentiles,
restaurant dashboard; p50/p99 and requests/s with N concurrent clients.

The system runs embedded on loopback (broker, Pinot stand-in, uvicorn); the
tracking tables are filled through the real broker with enriched records for
``--orders`` orders, as the stream job would write them.

    .venv/bin/python bench/bench_api.py --orders 5000 --clients 50 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    embedded_stack,
    machine,
    percentile,
    print_table,
    process_tree_rss,
    rss_mb,
    write_result,
)
from tracker.core.events import LIFECYCLE  # noqa: E402

STATUSES = [s.value for s in LIFECYCLE]


def seed(orders: int) -> dict:
    """Orders in the database and their enriched history in Pinot."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from tests.factories import make_customer, make_restaurant, place
    from tests.fixtures_pinot import item_event, order_event
    from tracker.core import kafka
    from tracker.core.events import now_ms, status_time_field

    rng = random.Random(7)
    customers = [make_customer(f"c{i}") for i in range(50)]
    restaurants = [make_restaurant(f"R{i}") for i in range(8)]
    ids, owners = [], {}
    for _ in range(orders):
        customer = rng.choice(customers)
        order = place(customer, rng.choice(restaurants))
        ids.append(order.pk)
        owners[order.pk] = customer
    producer = kafka.producer(**{"linger.ms": 20})
    now = now_ms()
    for order_id in ids:
        order = owners[order_id]
        created = now - rng.randrange(1, 7 * 24 * 3600) * 1000
        reached = rng.randrange(1, len(STATUSES) + 1)
        times = {}
        for version, status in enumerate(STATUSES[:reached], start=1):
            at = created + version * 60_000
            times[status] = at
            kafka.publish(
                producer,
                order_event(order_id, version, status, customer_id=order.pk, restaurant_id=1,
                            created_at=created, status_time=at,
                            status_times={s: t for s, t in times.items()}),
            )  # fmt: skip
        kafka.publish(
            producer,
            item_event(
                order_id, 1, rng.choice(["Margherita", "Pepsi", "Tiramisu"]), 2, 8.5, at=created
            ),
        )
        producer.poll(0)
    producer.flush(60)
    operator = get_user_model().objects.create_user("bench-ops", is_staff=True)
    return {
        "ids": ids,
        "operator": Token.objects.create(user=operator).key,
        "customers": [Token.objects.create(user=c.user).key for c in customers],
        "status_time_field": status_time_field,
    }


async def hammer(base: str, name: str, make_request, clients: int, seconds: float) -> dict:
    import httpx

    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def client_loop(client):
        nonlocal errors
        while time.monotonic() < deadline:
            method, path, token = make_request()
            start = time.perf_counter()
            response = await client.request(
                method, path, headers={"Authorization": f"Token {token}"}
            )
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                errors += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        started = time.monotonic()
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
        elapsed = time.monotonic() - started
    return {
        "endpoint": name,
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--workers", type=int, default=2, help="uvicorn worker processes (make run: 2)"
    )
    args = parser.parse_args()
    with embedded_stack(web_workers=args.workers) as stack:
        data = seed(args.orders)
        stack.wait_caught_up()
        rng = random.Random(3)
        ids, op, customers = data["ids"], data["operator"], data["customers"]
        cases = {
            "order detail": lambda: ("GET", f"/api/v1/orders/{rng.choice(ids)}/", op),
            "my orders": lambda: ("GET", "/api/v1/orders/?limit=20", rng.choice(customers)),
            "time-in-status percentiles": lambda: ("GET", "/api/v1/operations/time-in-status/", op),
            "restaurant dashboard": lambda: (
                "GET",
                "/api/v1/operations/restaurant-dashboard/?restaurant=1",
                op,
            ),
        }
        results = [
            asyncio.run(hammer(stack.web_url, name, fn, args.clients, args.seconds))
            for name, fn in cases.items()
        ]
        server_rss = process_tree_rss(stack.web_pid)
        pinot_rss = rss_mb(stack.pinot_pid)
    print_table(
        f"API latency, {args.clients} concurrent clients, {args.orders} orders, {args.workers} worker(s)",
        [
            (
                r["endpoint"],
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['rps']:.0f}",
                str(r["errors"]),
            )
            for r in results
        ],
        header=("endpoint", "p50 ms", "p99 ms", "req/s", "errors"),
    )
    print(
        f"  RSS after: ASGI server {server_rss:.0f} MiB (all workers), Pinot stand-in {pinot_rss:.0f} MiB"
    )
    path = write_result(
        "api",
        {
            "machine": machine(),
            "params": vars(args),
            "results": results,
            "server_rss_mb": server_rss,
            "pinot_rss_mb": pinot_rss,
        },
    )
    print("  written to", path)


if __name__ == "__main__":
    main()

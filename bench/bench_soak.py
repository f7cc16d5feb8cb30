"""Load and soak: the whole embedded system with the simulator at a multiple of the book's
peak, REST readers and WebSocket subscribers attached, for a fixed time.

Reports events in vs rows in Pinot (they must be equal once the pipeline drains),
errors seen by the readers and subscribers (must be zero), and the memory (RSS) of
every process at the start and the end. Not a test: prints a table and writes
bench/results/soak-*.json.

    .venv/bin/python bench/bench_soak.py --multiple 100 --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    machine,
    percentile,
    print_table,
    process_tree_rss,
    start_full_system,
    write_result,
)


async def readers_and_subscribers(
    base: str, seconds: float, readers: int, sockets: int, token: str, db: Path
) -> dict:
    import httpx
    import websockets

    stats = {
        "rest_requests": 0,
        "rest_errors": 0,
        "ws_messages": 0,
        "ws_errors": 0,
        "rest_latency": [],
    }
    deadline = time.monotonic() + seconds

    def order_ids() -> list[int]:
        with sqlite3.connect(db) as conn:
            return [
                r[0] for r in conn.execute("SELECT id FROM orders_order ORDER BY id DESC LIMIT 500")
            ]

    async def reader(client: httpx.AsyncClient, rng: random.Random):
        ids = order_ids()
        while time.monotonic() < deadline:
            if not ids or rng.random() < 0.05:
                ids = order_ids() or ids
                if not ids:
                    await asyncio.sleep(0.5)
                    continue
            start = time.perf_counter()
            stats["rest_requests"] += 1
            try:
                response = await client.get(
                    f"/api/v1/orders/{rng.choice(ids)}/",
                    headers={"Authorization": f"Token {token}"},
                )
            except httpx.HTTPError:  # a timeout under overload is an error, not the end
                stats["rest_errors"] += 1
                continue
            stats["rest_latency"].append(time.perf_counter() - start)
            if response.status_code != 200:
                stats["rest_errors"] += 1
            await asyncio.sleep(0.2)

    async def subscriber(order_id: int):
        url = base.replace("http", "ws") + f"/ws/orders/{order_id}/"
        try:
            async with websockets.connect(
                url, additional_headers={"Authorization": f"Token {token}"}
            ) as ws:
                while time.monotonic() < deadline:
                    try:
                        raw = await asyncio.wait_for(
                            ws.recv(), timeout=max(0.1, deadline - time.monotonic())
                        )
                    except TimeoutError:
                        break
                    stats["ws_messages"] += 1
                    if '"type":"error"' in raw.replace(" ", ""):
                        stats["ws_errors"] += 1
        except Exception:  # noqa: BLE001 - counted, the soak goes on
            stats["ws_errors"] += 1

    while not order_ids():
        await asyncio.sleep(0.5)
    rng = random.Random(5)
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        ids = order_ids()
        tasks = [asyncio.create_task(reader(client, random.Random(i))) for i in range(readers)]
        tasks += [asyncio.create_task(subscriber(rng.choice(ids))) for _ in range(sockets)]
        await asyncio.gather(*tasks)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--multiple", type=float, default=100, help="x the book's peak of 50 orders/min"
    )
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--sockets", type=int, default=200)
    args = parser.parse_args()

    supervisor, web_url, workdir = start_full_system(args.multiple)
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    operator = get_user_model().objects.get(username="operator")
    token = Token.objects.get_or_create(user=operator)[0].key
    pids = {c.component.name: c.process.pid for c in supervisor.children}
    rss_start = {name: process_tree_rss(pid) for name, pid in pids.items()}
    try:
        soak = asyncio.run(
            readers_and_subscribers(
                web_url, args.minutes * 60, args.readers, args.sockets, token,
                workdir / "ordertrack.sqlite3",
            )
        )  # fmt: skip
        rss_end = {name: process_tree_rss(pid) for name, pid in pids.items()}
        supervisor.stop_component("simulator")  # stop the load; let the pipeline drain
        events_in, rows = drain_and_count(workdir / "ordertrack.sqlite3")
    finally:
        supervisor.stop()
    restarts = {c.component.name: c.restarts for c in supervisor.children}
    result = {
        "machine": machine(),
        "params": vars(args),
        "events_in": events_in,
        "rows_in_pinot": rows,
        "equal": events_in == rows,
        "rest": {
            "requests": soak["rest_requests"],
            "errors": soak["rest_errors"],
            "p50_ms": percentile(soak["rest_latency"], 50) * 1000,
            "p99_ms": percentile(soak["rest_latency"], 99) * 1000,
        },  # fmt: skip
        "websocket": {"messages": soak["ws_messages"], "errors": soak["ws_errors"]},
        "rss_mb_start": rss_start,
        "rss_mb_end": rss_end,
        "restarts": restarts,
    }
    print_table(
        f"Soak: {args.multiple:g}x the book's peak for {args.minutes:g} min, {args.readers} REST readers, {args.sockets} sockets",
        [
            (k, str(events_in[k]), str(rows[k]), "yes" if events_in[k] == rows[k] else "NO")
            for k in events_in
        ],
        header=("what", "in the system of record", "in Pinot", "equal"),
    )
    print_table(
        "Readers and subscribers",
        [("REST requests / errors", f"{soak['rest_requests']} / {soak['rest_errors']}"),
         ("REST order detail p50 / p99 (ms)", f"{result['rest']['p50_ms']:.1f} / {result['rest']['p99_ms']:.1f}"),
         ("WebSocket messages / errors", f"{soak['ws_messages']} / {soak['ws_errors']}"),
         ("component restarts", ", ".join(f"{k}={v}" for k, v in restarts.items()))],
    )  # fmt: skip
    print_table(
        "Memory (RSS MiB, with children)",
        [(name, f"{rss_start[name]:.0f}", f"{rss_end[name]:.0f}") for name in pids],
        header=("process", "start", "end"),
    )
    print("  written to", write_result(f"soak-{args.multiple:g}x", result))


def drain_and_count(db: Path, timeout: float = 300) -> tuple[dict, dict]:
    """Wait until Pinot holds what the system of record holds (or time out); return both."""
    from tracker.core.events import OrderStatus, status_time_field
    from tracker.tracking.selectors import query

    def truth() -> dict:
        with sqlite3.connect(db) as conn:
            return {
                "orders": conn.execute("SELECT COUNT(*) FROM orders_order").fetchone()[0],
                "status changes": conn.execute(
                    "SELECT COUNT(*) FROM orders_orderstatuschange"
                ).fetchone()[0],
                "order items": conn.execute("SELECT COUNT(*) FROM orders_orderitem").fetchone()[0],
                "delivered orders": conn.execute(
                    "SELECT COUNT(*) FROM orders_order WHERE status='DELIVERED'"
                ).fetchone()[0],
            }

    def pinot() -> dict:
        columns = [status_time_field(status) for status in OrderStatus]
        counts = query(
            "SELECT "
            + ", ".join(f"COUNT(*) FILTER (WHERE {c} > 0) AS {c}" for c in columns)
            + " FROM orders_enriched"
        )[0]
        return {
            "orders": query("SELECT COUNT(*) AS n FROM orders_enriched")[0]["n"],
            "status changes": sum(int(counts[c]) for c in columns),
            "order items": query("SELECT COUNT(*) AS n FROM order_items_enriched")[0]["n"],
            "delivered orders": query(
                "SELECT COUNT(*) AS n FROM orders_enriched WHERE status = 'DELIVERED'"
            )[0]["n"],
        }

    deadline = time.monotonic() + timeout
    while True:
        want, have = truth(), pinot()
        if want == have or time.monotonic() > deadline:
            return want, have
        time.sleep(2)


if __name__ == "__main__":
    main()

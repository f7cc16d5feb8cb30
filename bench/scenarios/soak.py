"""Load and soak: the whole system with the simulator at a multiple of the book's peak,
REST readers and WebSocket subscribers attached, for a fixed time.

Two systems: the embedded one (``make run``: SQLite, a local Apache Kafka node, Spark local) by default, or
with ``--production`` the production-like run (``make run-prod``: PostgreSQL, Redis, the
push bridge as its own process, Spark on a standalone Master + Worker).

The REST readers read order details as the orders' customers, each reader as customers of
its own in turn, so every customer stays within its read budget (``API_THROTTLE_READS``);
the sockets are spread over operators (``WS_MAX_SOCKETS_PER_USER``).

Reports events in vs rows in Pinot (they must be equal once the pipeline drains),
errors seen by the readers and subscribers (must be zero), and every process's memory
(RSS, with its children) and CPU sampled every ``--every`` seconds, with the orders not yet
in Pinot at each sample. Not a test: prints a table and writes bench/results/soak-*.json.

    .venv/bin/python -m bench soak --multiple 10 --minutes 30
    .venv/bin/python -m bench soak --production --multiple 100 --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import shutil
import time

from bench import harness

#: A REST reader's pause after each answer: it reads at most 1 / this a second.
READER_PAUSE = 0.2


def customers_per_reader() -> int:
    """Customers each REST reader reads as, in turn, each within its read budget."""
    return harness.readers_for(1 / READER_PAUSE)


def newest_orders(tokens: list[str], each: int = 20) -> dict[str, list[int]]:
    """Up to ``each`` newest orders of each customer (by API token)."""
    from django.db import connection

    from tracker.orders.models import Order

    rows = (
        Order.objects.filter(customer__user__auth_token__key__in=tokens)
        .order_by("-id")
        .values_list("id", "customer__user__auth_token__key")[: len(tokens) * each]
    )
    orders: dict[str, list[int]] = {}
    for order_id, token in rows:
        orders.setdefault(token, []).append(order_id)
    connection.close()
    return orders


async def readers_and_subscribers(
    base: str,
    seconds: float,
    readers: int,
    sockets: int,
    socket_tokens: list[str],
    headers: dict,
    origin: str | None,
) -> dict:
    import httpx
    import websockets

    stats = {
        "rest_requests": 0,
        "rest_errors": 0,
        "ws_messages": 0,
        "ws_errors": 0,
        "rest_latency": [],
        "error_examples": [],  # the first few, so a count can be explained
    }

    def error(kind: str, what: object) -> None:
        stats[f"{kind}_errors"] += 1
        if len(stats["error_examples"]) < 20:
            stats["error_examples"].append(f"{kind}: {what}"[:300])

    async def reader(client: httpx.AsyncClient, tokens: list[str], rng: random.Random):
        """Reads as its own customers in turn (no other reader uses them), each customer's
        newest orders."""
        orders, turn = await asyncio.to_thread(newest_orders, tokens), 0
        while time.monotonic() < deadline:
            if rng.random() < 0.05:  # follow the orders the customers place meanwhile
                orders = await asyncio.to_thread(newest_orders, tokens) or orders
            token = tokens[turn % len(tokens)]
            turn += 1
            ids = orders.get(token)
            if not ids:  # not yet listed
                await asyncio.sleep(READER_PAUSE)
                continue
            start = time.perf_counter()
            stats["rest_requests"] += 1
            try:
                response = await client.get(
                    f"/api/v1/orders/{rng.choice(ids)}/",
                    headers={**headers, "Authorization": f"Token {token}"},
                )
            except httpx.HTTPError as exc:  # a timeout under overload is an error, not the end
                error("rest", repr(exc))
                continue
            stats["rest_latency"].append(time.perf_counter() - start)
            if response.status_code != 200:
                error("rest", f"{response.status_code} {response.text[:200]}")
            await asyncio.sleep(READER_PAUSE)

    async def subscriber(index: int, order_id: int):
        url = base.replace("http", "ws") + f"/ws/orders/{order_id}/"
        key = harness.token_of_socket(socket_tokens, index)  # spread over users: the cap
        try:
            async with websockets.connect(
                url,
                additional_headers={**headers, "Authorization": f"Token {key}"},
                origin=origin,
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
                        error("ws", raw)
        except Exception as exc:  # noqa: BLE001 - counted, the soak goes on
            error("ws", repr(exc))

    each = customers_per_reader()
    # The customers who ordered last (the simulator places orders for them meanwhile).
    pairs = await asyncio.to_thread(harness.customer_orders, readers * each)
    customers = list(dict.fromkeys(token for _, token in pairs))
    ids = [order_id for order_id, _ in pairs]
    deadline = time.monotonic() + seconds
    rng = random.Random(5)
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        tasks = [
            asyncio.create_task(
                reader(client, customers[i * each : (i + 1) * each], random.Random(i))
            )
            for i in range(readers)
        ]
        tasks += [asyncio.create_task(subscriber(i, rng.choice(ids))) for i in range(sockets)]
        await asyncio.gather(*tasks)
    return stats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    harness.add_multiple(parser, default=100)
    harness.add_duration(
        parser, minutes=10, every=10, sampled="samples of memory, CPU and orders not in Pinot"
    )
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument(
        "--production", action="store_true",
        help="the production-like run (PostgreSQL, Redis, Spark cluster) instead of make run's",
    )  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    if args.production:
        system = harness.start_production_run(args.multiple)
        children, workdir = system.children, system.workdir
        web_url, headers = system.endpoint.url, system.endpoint.headers
        origin = system.endpoint.origin
        stop_simulator = lambda: system.run.app.stop_component("simulator")  # noqa: E731
        stop_all = system.stop
    else:
        launched = harness.start_full_system(args.multiple, args.readers / READER_PAUSE)
        children, web_url, workdir = launched.children, launched.web_url, launched.workdir
        headers, origin = {}, None
        stop_simulator = lambda: launched.supervisor.stop_component("simulator")  # noqa: E731
        stop_all = launched.stop
    try:
        harness.wait_for_operator()  # the demo world is seeded
        sampler = harness.MemorySampler(children, every=args.every)
        sampler.start()
        soak = asyncio.run(
            readers_and_subscribers(
                web_url,
                args.minutes * 60,
                args.readers,
                args.sockets,
                harness.operator_tokens(args.sockets),
                headers,
                origin,
            )
        )
        sampler.stopped.set()
        sampler.join()
        stop_simulator()  # stop the load; let the pipeline drain
        events_in, rows = harness.drain_and_count()
    finally:
        stop_all()
    restarts = {c.component.name: c.restarts for c in children}
    series = sampler.samples
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"soak-{'prod-' if args.production else ''}{args.multiple:g}x-{stamp}"
    logs = harness.RESULTS / f"{name}-logs"
    if (workdir / "logs").is_dir():
        shutil.copytree(workdir / "logs", logs, dirs_exist_ok=True)
    behind = [row["orders_not_in_pinot"] for row in series]
    behind = [b if isinstance(b, int) else None for b in behind]
    span = max(1, series[-1]["t_s"] - series[0]["t_s"])
    result = {
        "env": {
            k: os.environ[k]
            for k in ("KAFKA_RETENTION_BYTES", "KAFKA_RETENTION_MS", "PINOT_RETENTION_DAYS")
            if k in os.environ
        },
        "system": "production-like (make run-prod)" if args.production else "embedded (make run)",
        "events_in": events_in,
        "rows_in_pinot": rows,
        "equal": events_in == rows,
        "rest": {
            "requests": soak["rest_requests"],
            "errors": soak["rest_errors"],
            "p50_ms": harness.percentile(soak["rest_latency"], 50) * 1000,
            "p99_ms": harness.percentile(soak["rest_latency"], 99) * 1000,
        },  # fmt: skip
        "websocket": {"messages": soak["ws_messages"], "errors": soak["ws_errors"]},
        "error_examples": soak["error_examples"],
        # Over the sampled window: which process used the cores, and the load reached.
        "cpu_cores_used": {
            name: round((series[-1]["cpu_s"][name] - series[0]["cpu_s"][name]) / span, 2)
            for name in series[-1]["cpu_s"]
        },
        # Issue 29's "no stall": at constant input the lag never grows for over 60 s in a row.
        "lag_growth_longest_s": harness.longest_growth_s(behind, args.every),
        "orders_not_in_pinot_max": max((b for b in behind if b is not None), default=None),
        "logs": str(logs.relative_to(harness.RESULTS.parent.parent)) if logs.exists() else None,
        "orders_per_min_reached": round(
            (series[-1].get("orders", 0) - series[0].get("orders", 0)) * 60 / span, 1
        ),
        "rss_mb_series": series,
        "rss_mb_start": series[0]["rss_mb"],
        "rss_mb_end": series[-1]["rss_mb"],
        "restarts": restarts,
        "workdir": str(workdir),
    }
    system = "production-like run" if args.production else "embedded system"
    harness.print_table(
        f"Soak ({system}): {args.multiple:g}x the book's peak for {args.minutes:g} min, "
        f"{args.readers} REST readers, {args.sockets} sockets",
        [
            (k, str(events_in[k]), str(rows[k]), "yes" if events_in[k] == rows[k] else "NO")
            for k in events_in
        ],
        header=("what", "in the system of record", "in Pinot", "equal"),
    )
    harness.print_table(
        "Readers and subscribers",
        [("REST requests / errors", f"{soak['rest_requests']} / {soak['rest_errors']}"),
         ("REST order detail p50 / p99 (ms)", f"{result['rest']['p50_ms']:.1f} / {result['rest']['p99_ms']:.1f}"),
         ("WebSocket messages / errors", f"{soak['ws_messages']} / {soak['ws_errors']}"),
         ("component restarts", ", ".join(f"{k}={v}" for k, v in restarts.items())),
         ("orders placed per minute", str(result["orders_per_min_reached"])),
         ("orders not in Pinot: most, longest growth (s)",
          f"{result['orders_not_in_pinot_max']}, {result['lag_growth_longest_s']:g}"),
         ("cores used", ", ".join(f"{k}={v}" for k, v in result["cpu_cores_used"].items())),
         *(("error", e) for e in soak["error_examples"][:5])],
    )  # fmt: skip
    names = [c.component.name for c in children]
    harness.print_table(
        f"Memory (RSS MiB, with children) every {args.every:g} s; orders not yet in Pinot",
        [
            (f"{row['t_s']}s", *(str(row["rss_mb"][n]) for n in names),
             str(row["orders_not_in_pinot"]))
            for row in series
        ],
        header=("t", *names, "behind"),
    )  # fmt: skip
    print("  logs in", logs)
    return result

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

    .venv/bin/python bench/bench_soak.py --multiple 10 --minutes 30
    .venv/bin/python bench/bench_soak.py --production --multiple 100 --minutes 10
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

#: A REST reader's pause after each answer: it reads at most 1 / this a second.
READER_PAUSE = 0.2


def customers_per_reader() -> int:
    """Customers each REST reader reads as, in turn, each within its read budget."""
    return common.readers_for(1 / READER_PAUSE)


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
        key = common.token_of_socket(socket_tokens, index)  # spread over users: the cap
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
    pairs = await asyncio.to_thread(common.customer_orders, readers * each)
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


class MemorySampler(threading.Thread):
    """Every ``every`` seconds: each process's RSS and CPU seconds so far (with children),
    the orders placed so far and those not yet in Pinot (so the load reached and the
    process that saturates show beside the memory)."""

    def __init__(self, children: list, every: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.children, self.every = children, every
        self.samples: list[dict] = []
        self.stopped = threading.Event()
        self.t0 = time.monotonic()
        self._consumer = None

    def sample(self) -> None:
        from django.db import connection

        from tracker.orders.models import Order
        from tracker.tracking.selectors import query

        row: dict = {"t_s": round(time.monotonic() - self.t0)}
        # The current process of each component: a restarted one has a new pid.
        row["rss_mb"] = {
            c.component.name: round(common.process_tree_rss(c.process.pid)) if c.process else 0
            for c in self.children
        }
        row["cpu_s"] = {
            c.component.name: round(common.process_tree_cpu(c.process.pid), 1) if c.process else 0
            for c in self.children
        }
        try:
            row["records"] = self.source_records()
        except Exception as exc:  # noqa: BLE001 - a sample, not the run
            row["records"] = f"error: {exc}"[:200]
        try:
            row["orders"] = Order.objects.count()
            in_pinot = query("SELECT COUNT(*) AS n FROM orders_enriched")[0]["n"]
            row["orders_not_in_pinot"] = row["orders"] - int(in_pinot)
        except Exception as exc:  # noqa: BLE001 - a sample, not the run
            row["orders_not_in_pinot"] = f"error: {exc}"[:200]
        connection.close()
        self.samples.append(row)

    def source_records(self) -> dict[str, int]:
        """Records written so far to each source topic (orders, status changes, GPS points):
        the load each window of the run carried."""
        from contract.events import SOURCE_TOPICS, topic_name
        from contract.kafka import consumer, end_offsets

        if self._consumer is None:
            self._consumer = consumer(**{"group.id": "bench-soak-sampler"})
        return {
            str(t): sum(end_offsets(self._consumer, topic_name(t)).values()) for t in SOURCE_TOPICS
        }

    def run(self) -> None:
        try:
            while True:
                self.sample()
                if self.stopped.wait(self.every):
                    return
        finally:
            if self._consumer is not None:
                self._consumer.close()


def start_production_run(multiple: float):
    """``make run-prod``'s processes (compose's command lines and environment) with the
    simulator; Django in this process points at its PostgreSQL."""
    from bench.common import BOOK_PEAK_PER_MIN, free_port
    from contract.conf import BASE_DIR
    from embedded import compose as prod

    # Under var/: the unprivileged user the image's processes run as must reach it.
    var = BASE_DIR / "var" / f"bench-prod-{time.strftime('%Y%m%d-%H%M%S')}" / "prod"
    var.parent.mkdir(parents=True)
    overrides = {
        "SIMULATOR_RATE": str(BOOK_PEAK_PER_MIN * multiple),
        "SIMULATOR_PACE": "4",
        "LOG_LEVEL": "WARNING",
    }
    p = prod.plan(var=var, ports=prod.Ports(web=free_port()), overrides=overrides, demo=True)
    run = prod.ProductionRun(p, out=open(var.parent / "run.log", "w"))  # noqa: SIM115
    run.start()
    env = p.one_shots["migrate"][1]
    os.environ.update(
        {
            "DATABASE_URL": env["DATABASE_URL"],
            "PINOT_BROKER_URL": f"http://127.0.0.1:{p.ports.pinot}",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": env["DJANGO_SECRET_KEY"],
            "DJANGO_DEBUG": "true",  # this process only reads; it serves nothing
        }
    )
    import django

    django.setup()
    children = [*run.infra.children, *run.app.children]
    return run, children, f"http://localhost:{p.ports.web}", var.parent


def wait_for_operator(timeout: float = 300):
    """The production run's simulator seeds the demo users when it starts."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.simulator.seed import OPERATOR_USERNAME

    deadline = time.monotonic() + timeout
    while True:
        user = get_user_model().objects.filter(username=OPERATOR_USERNAME).first()
        if user is not None:
            return user
        if time.monotonic() > deadline:
            raise SystemExit("the simulator did not seed the demo data")
        connection.close()
        time.sleep(1)


def main() -> None:
    parser = common.arguments(__doc__)
    common.add_multiple(parser, default=100)
    common.add_duration(
        parser, minutes=10, every=10, sampled="samples of memory, CPU and orders not in Pinot"
    )
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument(
        "--production", action="store_true",
        help="the production-like run (PostgreSQL, Redis, Spark cluster) instead of make run's",
    )  # fmt: skip
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    if args.production:
        run, children, web_url, workdir = start_production_run(args.multiple)
        headers, origin = {"X-Forwarded-Proto": "https"}, "https://localhost"
        stop_simulator = lambda: run.app.stop_component("simulator")  # noqa: E731
        stop_all = run.stop
    else:
        supervisor, web_url, workdir = common.start_full_system(
            args.multiple, args.readers / READER_PAUSE
        )
        children = supervisor.children
        headers, origin = {}, None
        stop_simulator = lambda: supervisor.stop_component("simulator")  # noqa: E731
        stop_all = supervisor.stop
    try:
        wait_for_operator()  # the demo world is seeded
        sampler = MemorySampler(children, every=args.every)
        sampler.start()
        soak = asyncio.run(
            readers_and_subscribers(
                web_url,
                args.minutes * 60,
                args.readers,
                args.sockets,
                common.operator_tokens(args.sockets),
                headers,
                origin,
            )
        )
        sampler.stopped.set()
        sampler.join()
        stop_simulator()  # stop the load; let the pipeline drain
        events_in, rows = drain_and_count()
    finally:
        stop_all()
    restarts = {c.component.name: c.restarts for c in children}
    series = sampler.samples
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"soak-{'prod-' if args.production else ''}{args.multiple:g}x-{stamp}"
    logs = common.RESULTS / f"{name}-logs"
    if (workdir / "logs").is_dir():
        shutil.copytree(workdir / "logs", logs, dirs_exist_ok=True)
    behind = [row["orders_not_in_pinot"] for row in series]
    behind = [b if isinstance(b, int) else None for b in behind]
    span = max(1, series[-1]["t_s"] - series[0]["t_s"])
    result = {
        "machine": common.machine(),
        "params": vars(args),
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
            "p50_ms": common.percentile(soak["rest_latency"], 50) * 1000,
            "p99_ms": common.percentile(soak["rest_latency"], 99) * 1000,
        },  # fmt: skip
        "websocket": {"messages": soak["ws_messages"], "errors": soak["ws_errors"]},
        "error_examples": soak["error_examples"],
        # Over the sampled window: which process used the cores, and the load reached.
        "cpu_cores_used": {
            name: round((series[-1]["cpu_s"][name] - series[0]["cpu_s"][name]) / span, 2)
            for name in series[-1]["cpu_s"]
        },
        # Issue 29's "no stall": at constant input the lag never grows for over 60 s in a row.
        "lag_growth_longest_s": common.longest_growth_s(behind, args.every),
        "orders_not_in_pinot_max": max((b for b in behind if b is not None), default=None),
        "logs": str(logs.relative_to(common.RESULTS.parent.parent)) if logs.exists() else None,
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
    common.print_table(
        f"Soak ({system}): {args.multiple:g}x the book's peak for {args.minutes:g} min, "
        f"{args.readers} REST readers, {args.sockets} sockets",
        [
            (k, str(events_in[k]), str(rows[k]), "yes" if events_in[k] == rows[k] else "NO")
            for k in events_in
        ],
        header=("what", "in the system of record", "in Pinot", "equal"),
    )
    common.print_table(
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
    common.print_table(
        f"Memory (RSS MiB, with children) every {args.every:g} s; orders not yet in Pinot",
        [
            (f"{row['t_s']}s", *(str(row["rss_mb"][n]) for n in names),
             str(row["orders_not_in_pinot"]))
            for row in series
        ],
        header=("t", *names, "behind"),
    )  # fmt: skip
    path = common.RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
    print("  written to", path, "and", logs)


def drain_and_count(timeout: float = 300) -> tuple[dict, dict]:
    """Wait until Pinot holds what the system of record holds (or time out); return both."""
    from django.db import connection

    from contract.events import OrderStatus, status_time_field
    from tracker.orders.models import Order, OrderItem, OrderStatusChange
    from tracker.tracking.selectors import query

    def truth() -> dict:
        counts = {
            "orders": Order.objects.count(),
            "status changes": OrderStatusChange.objects.count(),
            "order items": OrderItem.objects.count(),
            "delivered orders": Order.objects.filter(status=OrderStatus.DELIVERED).count(),
        }
        connection.close()
        return counts

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

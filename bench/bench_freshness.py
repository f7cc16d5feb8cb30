"""End-to-end freshness: from the moment the API accepts a status change or a GPS point to
(a) visible through the REST read and (b) delivered on a subscribed WebSocket; against
a naive baseline (a Django view reading the database, polled every second).

The whole embedded system runs (supervisor, every component) with the simulator at a
multiple of the book's peak (50 orders/min, a GPS point per second per delivery) as
background load. Probe orders are placed, advanced and tracked through the public API
by the benchmark itself. Not a test: prints a table, writes bench/results/freshness-*.json.

    .venv/bin/python bench/bench_freshness.py --multiples 1,10,100 --probes 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    BOOK_PEAK_PER_MIN,
    free_port,
    machine,
    percentile,
    print_table,
    process_tree_rss,
    start_full_system,
    wait_port,
    write_result,
)


def start_system(multiple: float):
    supervisor, web_url, _ = start_full_system(multiple)
    naive_port = free_port()
    naive = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bench.naive_baseline:application", "--port", str(naive_port),
         "--log-level", "warning", "--no-access-log"],
        cwd=ROOT,
    )  # fmt: skip
    wait_port(naive_port)
    return supervisor, naive, web_url, f"http://127.0.0.1:{naive_port}"


def tokens() -> dict:
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from tracker.couriers.models import Courier
    from tracker.customers.models import Customer

    users = get_user_model().objects
    customer = Customer.objects.order_by("id").first()
    return {
        "customer": Token.objects.get_or_create(user=customer.user)[0].key,
        "operator": Token.objects.get_or_create(user=users.get(username="operator"))[0].key,
        "couriers": {
            c.pk: Token.objects.get_or_create(user=c.user)[0].key for c in Courier.objects.all()
        },
    }


async def naive_poll(client, url: str, want: str, accepted: float, phase: float) -> float:
    """A baseline client: GET the database view every second until it shows ``want``."""
    await asyncio.sleep(phase)
    while True:
        if (await client.get(url)).json()["status"] == want:
            return time.perf_counter() - accepted
        await asyncio.sleep(1.0)


async def probe(base: str, naive_base: str, keys: dict, probes: int) -> dict:
    """Place probe orders, then time each change from API accept to REST and WebSocket."""
    import httpx
    import websockets

    rest, push, naive, errors = [], [], [], 0
    auth = lambda key: {"Authorization": f"Token {key}"}  # noqa: E731
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        menu = (
            await client.get("/api/v1/restaurants/1/menu/", headers=auth(keys["customer"]))
        ).json()
        product = menu["categories"][0]["products"][0]["id"]
        # A saturated system must not hang the benchmark: stop probing after 5 minutes
        # and report how many probes completed (the table's n).
        budget = time.monotonic() + 300
        for index in range(probes):
            if time.monotonic() > budget:
                errors += 1
                break
            placed = await client.post(
                "/api/v1/orders/",
                json={"restaurant_id": 1, "items": [{"product_id": product, "quantity": 1}],
                      "delivery": {"address": "probe", "lat": 12.975, "lon": 77.605}},
                headers=auth(keys["customer"]),
            )  # fmt: skip
            order_id = placed.json()["id"]
            # Wait until the pipeline knows the order, then subscribe.
            while True:
                reply = await client.get(
                    f"/api/v1/orders/{order_id}/", headers=auth(keys["operator"])
                )
                if reply.status_code == 200 and reply.json()["tracking"]["source"] == "pinot":
                    break
                await asyncio.sleep(0.05)
            ws = await websockets.connect(
                base.replace("http", "ws") + f"/ws/orders/{order_id}/",
                additional_headers=auth(keys["operator"]),
                max_queue=None,
            )
            snapshot = json.loads(await ws.recv())
            version = snapshot["version"]
            for step in range(5):  # four kitchen steps, then GPS points while out for delivery
                accepted = time.perf_counter()
                if step < 4:
                    response = await client.post(
                        f"/api/v1/orders/{order_id}/advance/", headers=auth(keys["operator"])
                    )
                    if response.status_code >= 300:
                        errors += 1
                        continue
                    body = response.json()
                    want = lambda d, s=body["status"]: d["status"] == s  # noqa: E731
                else:
                    courier = body["courier"]["id"]
                    lat = 12.97 + index * 1e-4
                    response = await client.post(
                        f"/api/v1/orders/{order_id}/locations/",
                        json={"lat": lat, "lon": 77.62},
                        headers=auth(keys["couriers"][courier]),
                    )
                    want = lambda d, lat=lat: bool(d["position"]) and d["position"]["lat"] == lat  # noqa: E731
                    accepted = time.perf_counter()  # 202: the broker has it
                if response.status_code >= 300:
                    errors += 1
                    continue
                naive_task = None
                if step < 4:
                    naive_task = asyncio.create_task(
                        naive_poll(
                            client,
                            f"{naive_base}/naive/orders/{order_id}/",
                            body["status"],
                            accepted,
                            random.random(),
                        )
                    )  # a poller's phase relative to the change is random

                async def wait_push(min_version=version, accepted=accepted, ws=ws, want=want):
                    while True:
                        message = json.loads(await ws.recv())
                        if (
                            message.get("type") == "update"
                            and message["version"] > min_version
                            and want(message)
                        ):
                            return time.perf_counter() - accepted, message["version"]

                push_task = asyncio.create_task(wait_push())
                step_deadline = time.monotonic() + 60
                while time.monotonic() < step_deadline:  # REST visibility, polled every 20 ms
                    reply = await client.get(
                        f"/api/v1/orders/{order_id}/", headers=auth(keys["operator"])
                    )
                    if reply.status_code != 200:  # e.g. 503 while Pinot is saturated
                        errors += 1
                        await asyncio.sleep(0.1)
                        continue
                    if want(reply.json()):
                        rest.append(time.perf_counter() - accepted)
                        break
                    await asyncio.sleep(0.02)
                try:
                    pushed, version = await asyncio.wait_for(push_task, timeout=30)
                    push.append(pushed)
                except TimeoutError:
                    errors += 1
                if naive_task is not None:
                    naive.append(await asyncio.wait_for(naive_task, timeout=30))
            await ws.close()
    return {"rest": rest, "push": push, "naive": naive, "errors": errors}


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_ms": percentile(values, 50) * 1000,
        "p95_ms": percentile(values, 95) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "max_ms": max(values, default=0) * 1000,
    }


def one_level(multiple: float, probes: int, warmup: float) -> dict:
    supervisor, naive, base, naive_base = start_system(multiple)
    try:
        time.sleep(warmup)
        keys = tokens()
        measured = asyncio.run(probe(base, naive_base, keys, probes))
        rss = {
            c.component.name: process_tree_rss(c.process.pid)
            for c in supervisor.children
            if c.process
        }
    finally:
        naive.terminate()
        supervisor.stop()
    return {
        "multiple": multiple,
        "orders_per_min": BOOK_PEAK_PER_MIN * multiple,
        "rest": summary(measured["rest"]),
        "websocket": summary(measured["push"]),
        "naive_polling": summary(measured["naive"]),
        "errors": measured["errors"],
        "rss_mb": rss,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multiples", default="1,10,100")
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--warmup", type=float, default=30, help="seconds of load before probing")
    parser.add_argument("--one-level", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_level is not None:  # a child run: one fresh system per load level
        print("RESULT " + json.dumps(one_level(args.one_level, args.probes, args.warmup)))
        return
    levels = []
    for multiple in [float(m) for m in args.multiples.split(",")]:
        child = subprocess.run(
            [sys.executable, __file__, "--one-level", str(multiple), "--probes", str(args.probes),
             "--warmup", str(args.warmup)],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            print(child.stdout[-3000:], child.stderr[-3000:])
            raise SystemExit(f"level {multiple:g}x failed")
        level = json.loads(lines[-1][len("RESULT ") :])
        levels.append(level)
        rows = [
            (
                path,
                str(s["n"]),
                f"{s['p50_ms']:.0f}",
                f"{s['p95_ms']:.0f}",
                f"{s['p99_ms']:.0f}",
                f"{s['max_ms']:.0f}",
            )
            for path, s in (
                ("accepted -> REST (Pinot)", level["rest"]),
                ("accepted -> WebSocket push", level["websocket"]),
                ("baseline: poll DB view every 1 s", level["naive_polling"]),
            )
        ]
        print_table(
            f"Freshness at {multiple:g}x the book's peak ({BOOK_PEAK_PER_MIN * multiple:g} orders/min)",
            rows, header=("path", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"),
        )  # fmt: skip
        push, naive = level["websocket"], level["naive_polling"]
        if push["p50_ms"]:
            print(
                f"  baseline / push ratio: p50 {naive['p50_ms'] / push['p50_ms']:.1f}x, p99 {naive['p99_ms'] / max(push['p99_ms'], 1):.1f}x"
            )
        print(
            "  RSS MiB: "
            + ", ".join(f"{k}={v:.0f}" for k, v in level["rss_mb"].items())
            + f"; errors={level['errors']}"
        )
    print(
        "  written to",
        write_result("freshness", {"machine": machine(), "params": vars(args), "levels": levels}),
    )


if __name__ == "__main__":
    main()

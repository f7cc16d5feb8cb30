"""Push latency: from an orders_enriched record on Kafka to a subscribed WebSocket client.

A Kafka node, Pinot and the ASGI server (with the push bridge) on loopback; N sockets
(one order each), then status updates for random orders at a fixed rate (open loop),
each latency from its scheduled send time, so a backlog counts; the generator's and the
server's CPU share and the server's RSS per socket.

    .venv/bin/python -m bench push --sockets 5000 --rate 200 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from bench import harness

OPTIONS = {
    "--sockets": 1000,
    "--rate": (200.0, "updates per second"),
    "--seconds": 20.0,
    "--workers": (2, "uvicorn worker processes"),
    "--no-deflate": (False, "clients do not offer permessage-deflate (browsers do)"),
}


def run(args: argparse.Namespace) -> dict:
    import uvloop

    env = {"WEB_WORKERS": str(args.workers)}
    with harness.system(["kafka", "pinot", "web"], env=env) as stack:
        order_ids, tokens = _seed(args.sockets)
        port = int(stack.web_url.rsplit(":", 1)[1])
        result = uvloop.run(_drive(args, port, order_ids, tokens, stack.pid("web")))
    rows = [
        ("sockets connected", f"{result['connected']}/{args.sockets}"),
        ("connect all (s)", f"{result['connect_seconds']:.1f}"),
        ("updates sent / received", f"{result['sent']} / {result['received']}"),
        ("push latency p50 (ms)", f"{result['p50_ms']:.1f}"),
        ("push latency p99 (ms)", f"{result['p99_ms']:.1f}"),
        ("push latency max (ms)", f"{result['max_ms']:.1f}"),
        ("server CPU in the window (cores)", f"{result['server_cpu_cores']:.2f}"),
        ("load generator CPU in the window (cores)", f"{result['client_cpu_cores']:.2f}"),
        (
            "ASGI server RSS idle -> loaded (MB)",
            f"{result['server_rss_mb_before']:.0f} -> {result['server_rss_mb_after']:.0f}",
        ),
        ("memory per socket (KB)", f"{result['kb_per_socket']:.1f}"),
    ]
    harness.print_table(
        f"Push fan-out, {args.sockets} sockets, {args.rate:g} updates/s for {args.seconds:g}s, "
        f"{args.workers} server process(es)",
        rows,
    )
    return result


def _seed(n: int) -> tuple[list[int], list[str]]:
    from tests.factories import make_customer, make_restaurant, place

    customer, restaurant = make_customer("bench"), make_restaurant()
    ids = [place(customer, restaurant).pk for _ in range(n)]
    return ids, harness.operator_tokens(n)  # the sockets spread over operators


async def _drive(args, port: int, order_ids: list[int], tokens: list[str], server_pid: int) -> dict:
    from websockets.asyncio.client import connect as ws_connect

    from contract.events import now_ms
    from runtime import kafka
    from tests.fixtures_pinot import order_event

    scheduled: dict[tuple[int, int], float] = {}
    worst: dict[int, float] = {}  # second of the window -> worst latency of its sends
    latencies: list[float] = []
    sockets = []
    rss_before = harness.process_tree_rss(server_pid)  # all uvicorn workers
    start = time.monotonic()

    async def connect(index: int, order_id: int):
        ws = await ws_connect(
            f"ws://127.0.0.1:{port}/ws/orders/{order_id}/",
            additional_headers={"Authorization": f"Token {harness.token_of_socket(tokens, index)}"},
            max_queue=None,
            open_timeout=120,
            ping_interval=None,  # the server pings; answering is enough
            compression=None if args.no_deflate else "deflate",
        )
        first = json.loads(await ws.recv())
        assert first["type"] == "snapshot", first
        return ws

    for chunk in range(0, len(order_ids), 100):
        opened = await asyncio.gather(
            *(connect(chunk + i, o) for i, o in enumerate(order_ids[chunk : chunk + 100])),
            return_exceptions=True,
        )
        sockets += [ws for ws in opened if not isinstance(ws, BaseException)]
    connect_seconds = time.monotonic() - start
    print(f"  {len(sockets)} sockets open after {connect_seconds:.0f}s; sending", flush=True)

    async def reader(ws):
        async for raw in ws:
            if '"update"' not in raw:
                continue  # heartbeats
            message = json.loads(raw)
            key = (message["order_id"], message["version"])
            if key in scheduled:
                latency = time.perf_counter() - scheduled[key]
                latencies.append(latency)
                second = int(scheduled[key] - window_start)
                worst[second] = max(worst.get(second, 0.0), latency)

    window_start = time.perf_counter()
    readers = [asyncio.create_task(reader(ws)) for ws in sockets]
    updates = kafka.Deliveries(kafka.producer(**{"linger.ms": 0}))
    updates.producer.list_topics(timeout=10)  # warm: the first produce would wait for metadata
    versions = dict.fromkeys(order_ids, 1)
    statuses = ["ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED", "OUT_FOR_DELIVERY"]
    rng = random.Random(1)
    interval = 1.0 / args.rate
    cpu_client, cpu_server = time.process_time(), harness.process_tree_cpu(server_pid)
    window_start = time.perf_counter()  # read by reader() from here on
    deadline = window_start + args.seconds
    next_at = window_start
    while next_at < deadline:
        while next_at <= min(time.perf_counter(), deadline):  # open loop: catch up on due sends
            order_id = rng.choice(order_ids)
            versions[order_id] += 1
            version = versions[order_id]
            event = order_event(
                order_id, version, statuses[version % len(statuses)], created_at=now_ms() - 1000
            )
            scheduled[(order_id, version)] = next_at
            updates.publish(event)
            next_at += interval
        updates.producer.poll(0)
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    updates.flush(10)
    sent = updates.total
    drain_until = time.perf_counter() + 10
    while len(latencies) < sent and time.perf_counter() < drain_until:
        await asyncio.sleep(0.1)
    window = time.perf_counter() - window_start
    cpu_client = time.process_time() - cpu_client
    cpu_server = harness.process_tree_cpu(server_pid) - cpu_server
    rss_after = harness.process_tree_rss(server_pid)
    for task in readers:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return {
        "connected": len(sockets),
        "connect_seconds": connect_seconds,
        "sent": sent,
        "received": len(latencies),
        "p50_ms": harness.percentile(latencies, 50) * 1000,
        "p99_ms": harness.percentile(latencies, 99) * 1000,
        "max_ms": max(latencies, default=0) * 1000,
        "max_ms_by_second": [round(worst.get(s, 0.0) * 1000) for s in range(int(args.seconds))],
        "window_seconds": window,
        "server_cpu_cores": cpu_server / window,
        "client_cpu_cores": cpu_client / window,
        "server_rss_mb_before": rss_before,
        "server_rss_mb_after": rss_after,
        "kb_per_socket": (rss_after - rss_before) * 1024 / max(len(sockets), 1),
    }

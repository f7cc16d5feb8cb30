"""End-to-end freshness: from the moment the API accepts a status change or a GPS point to
(a) visible through the REST read and (b) delivered on a subscribed WebSocket; against
a client polling the REST detail every second.

Levels (``--multiples``): the whole system, the simulator at N x the book's peak; probe
orders placed, advanced and tracked through the public API, each change timed on the
socket (first message and the stream job's ``update``), in REST, and by a 1-second poller.

Watchers (``--watchers 100,1000``): three phases of ``--watch-seconds`` on one system, N
fresh orders advanced at ``--changes`` a second: the idle baseline, N WebSockets, N
clients polling REST every second (each its order's customer, within every per-user
limit). Freshness (commit -> the watcher sees it) and the web's and Pinot's CPU per
watcher-minute over the idle phase.

    .venv/bin/python -m bench freshness --multiples 1,10,100 --probes 20
        --watchers 100,1000 --watch-seconds 60  (one line)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import threading
import time

from bench import harness
from contract.events import Topic
from contract.load import Load
from runtime.conf import var_dir
from runtime.kafka import ConsumerRecord

#: The probe's pause between its reads while it waits for the pipeline to know an order.
KNOWN_EVERY = 0.05


def tokens(rest_every: float = 1.0) -> dict:
    """The probe's customer, couriers, and operators enough for its reads: its REST
    visibility poll every ``rest_every`` s (or the wait for a new order, every
    ``KNOWN_EVERY`` s) beside the 1-second poller, dealt over them within each one's
    ``API_THROTTLE_READS_STAFF``."""
    from tracker.accounts.services import issue_token
    from tracker.couriers.models import Courier
    from tracker.customers.models import Customer

    customer = Customer.objects.order_by("id").first()
    reads = max(1 / rest_every, 1 / KNOWN_EVERY) + 1
    return {
        "customer": issue_token(customer.user).key,
        "operators": harness.operators(harness.readers_for(reads, staff=True), "bench-probe"),
        "couriers": {c.pk: issue_token(c.user).key for c in Courier.objects.all()},
    }


async def rest_poll(client, url: str, headers, want: str, accepted: float, phase: float):
    """The book's design: GET the Pinot-backed REST detail every second until it shows
    ``want`` (each read with the headers ``headers()`` gives)."""
    await asyncio.sleep(phase)
    while True:
        reply = await client.get(url, headers=headers())
        if reply.status_code == 200 and reply.json()["status"] == want:
            return time.perf_counter() - accepted
        await asyncio.sleep(1.0)


async def probe(
    base: str,
    keys: dict,
    probes: int,
    gps_points: int = 5,
    rest_every: float = 0.02,
    fast_only: bool = False,
) -> dict:
    """Place probe orders, then time each change from API accept to REST and WebSocket.

    On the socket, each change is timed twice, in the same run: when the stream job's
    ``update`` shows it (the only path before the fast paths: "old"), and when the first
    message showing it arrives, a fast ``status``/``position`` or that update ("new").
    ``fast_only`` times the first message alone and moves on at once (no REST reads, no
    pollers, no waiting for the update), so a run gathers enough changes for a p99."""
    import httpx
    import websockets

    rest, push, rest_polled, errors = [], [], [], 0
    socket = {f"{kind}_{path}": [] for kind in ("status", "gps") for path in ("old", "new")}
    # Each change on the fast path, for its stages: (kind, order, status or latitude,
    # wall clock at accept, seconds to the API's answer, seconds to the first message).
    changes: list[tuple[str, int, object, float, float, float]] = []
    probe_orders: set[int] = set()
    follower = StageFollower((Topic.ORDER_STATUSES, Topic.DELIVERY_LOCATIONS), probe_orders)
    auth = lambda key: {"Authorization": f"Token {key}"}  # noqa: E731
    operators = itertools.cycle(keys["operators"])  # every operator read, dealt over them
    operator = lambda: auth(next(operators))  # noqa: E731
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        menu = (
            await client.get("/api/v1/restaurants/1/menu/", headers=auth(keys["customer"]))
        ).json()
        product = menu["categories"][0]["products"][0]["id"]
        # A saturated system must not hang the benchmark: stop probing after 5 minutes
        # and report how many probes completed (the table's n).
        budget = time.monotonic() + 600
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
            probe_orders.add(order_id)
            # Wait until the pipeline knows the order, then subscribe.
            while True:
                reply = await client.get(f"/api/v1/orders/{order_id}/", headers=operator())
                if reply.status_code == 200 and reply.json()["tracking"]["source"] == "pinot":
                    break
                await asyncio.sleep(KNOWN_EVERY)
            ws = await websockets.connect(
                base.replace("http", "ws") + f"/ws/orders/{order_id}/",
                additional_headers=auth(keys["customer"]),  # the customer's own socket
                max_queue=None,
            )
            snapshot = json.loads(await ws.recv())
            version = snapshot["version"]
            for step in range(4 + gps_points):  # four kitchen steps, then GPS points on the road
                accepted = time.perf_counter()
                accepted_wall = time.time()
                if step < 4:
                    response = await client.post(
                        f"/api/v1/orders/{order_id}/advance/", headers=operator()
                    )
                    if response.status_code >= 300:
                        errors += 1
                        continue
                    body = response.json()
                    want = lambda d, s=body["status"]: d["status"] == s  # noqa: E731
                    fast = lambda d, s=body["status"]: d["type"] == "status" and d["status"] == s  # noqa: E731
                else:
                    courier = body["courier"]["id"]
                    lat = 12.97 + index * 1e-4 + step * 1e-5
                    response = await client.post(
                        f"/api/v1/orders/{order_id}/locations/",
                        json={"lat": lat, "lon": 77.62},
                        headers=auth(keys["couriers"][courier]),
                    )
                    want = lambda d, lat=lat: bool(d["position"]) and d["position"]["lat"] == lat  # noqa: E731
                    fast = lambda d, want=want: d["type"] == "position" and want(d)  # noqa: E731
                    accepted = time.perf_counter()  # 202: the broker has it
                    accepted_wall = time.time()
                answered = time.perf_counter() - accepted
                if response.status_code >= 300:
                    errors += 1
                    continue
                poll_task = None
                if step < 4 and not fast_only:  # a poller's phase relative to the change is random
                    poll_task = asyncio.create_task(
                        rest_poll(
                            client,
                            f"/api/v1/orders/{order_id}/",
                            operator,
                            body["status"],
                            accepted,
                            random.random(),
                        )
                    )

                async def wait_push(
                    min_version=version, accepted=accepted, ws=ws, want=want, fast=fast
                ):
                    """(first message showing the change, the update showing it, version)."""
                    first = None
                    while True:
                        message = json.loads(await ws.recv())
                        now = time.perf_counter() - accepted
                        if first is None and fast(message):
                            first = now
                            if fast_only:
                                return first, None, min_version
                        if (
                            message.get("type") == "update"
                            and message["version"] > min_version
                            and want(message)
                        ):
                            return (now if first is None else first), now, message["version"]

                push_task = asyncio.create_task(wait_push())
                step_deadline = time.monotonic() + 60
                # REST visibility, polled every 20 ms (not timed in a fast-only run)
                while not fast_only and time.monotonic() < step_deadline:
                    reply = await client.get(f"/api/v1/orders/{order_id}/", headers=operator())
                    if reply.status_code != 200:  # e.g. 503 while Pinot is saturated
                        errors += 1
                        await asyncio.sleep(0.1)
                        continue
                    if want(reply.json()):
                        rest.append(time.perf_counter() - accepted)
                        break
                    await asyncio.sleep(rest_every)
                try:
                    first, pushed, version = await asyncio.wait_for(push_task, timeout=30)
                    kind = "status" if step < 4 else "gps"
                    if pushed is not None:
                        push.append(pushed)
                        socket[f"{kind}_old"].append(pushed)
                    socket[f"{kind}_new"].append(first)
                    what = body["status"] if step < 4 else lat
                    changes.append((kind, order_id, what, accepted_wall, answered, first))
                except TimeoutError:
                    errors += 1
                if poll_task is not None:
                    # A poller that does not see the change within 30 s is counted, not
                    # fatal: one slow poller must not throw away the whole run's figures.
                    try:
                        rest_polled.append(await asyncio.wait_for(poll_task, timeout=30))
                    except TimeoutError:
                        errors += 1
            await ws.close()
    return {
        "stages": fast_path_stages(changes, *follower.stop()),
        "rest": rest,
        "push": push,
        "rest_polling": rest_polled,
        "socket": socket,
        "errors": errors,
    }


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_ms": harness.percentile(values, 50) * 1000,
        "p95_ms": harness.percentile(values, 95) * 1000,
        "p99_ms": harness.percentile(values, 99) * 1000,
        "max_ms": max(values, default=0) * 1000,
    }


def one_level(
    multiple: float,
    probes: int,
    warmup: float,
    gps_points: int = 5,
    rest_every: float = 0.02,
    fast_only: bool = False,
) -> dict:
    supervisor = harness.start_full_system(multiple)
    base = supervisor.web_url
    try:
        time.sleep(warmup)
        keys = tokens(rest_every)
        bridge_before = bridge_histograms(base)
        measured = asyncio.run(probe(base, keys, probes, gps_points, rest_every, fast_only))
        bridge = {
            series: harness.histogram_quantiles(bridge_before[series], buckets)
            for series, buckets in bridge_histograms(base).items()
        }
        kafka_disk_mb = harness.disk_mb(var_dir() / "kafka")
        rss = {
            n: harness.process_tree_rss(p) for n, p in harness.pids_of(supervisor.children).items()
        }
    finally:
        supervisor.stop()
    return {
        "multiple": multiple,
        "orders_per_min": Load(multiple).orders_per_minute,
        "points_per_s_asked": Load(multiple).points_per_second,
        "rest": summary(measured["rest"]),
        "websocket": summary(measured["push"]),
        "rest_polling": summary(measured["rest_polling"]),
        "socket": {name: summary(values) for name, values in measured["socket"].items()},
        "fast_path_stages": measured["stages"],
        "bridge": bridge,
        "kafka_disk_mb": kafka_disk_mb,
        "errors": measured["errors"],
        "rss_mb": rss,
    }


def bridge_histograms(base: str) -> dict[str, dict[float, float]]:
    """The web's push-bridge histograms now: (metric, topic) -> cumulative buckets."""
    from contract.events import topic_name

    return {
        f"{short} {topic.value}": harness.histogram_buckets(
            f"{base}/metrics",
            f"ordertrack_push_bridge_{short}_seconds",
            {"topic": topic_name(topic)},
        )
        for short in ("record_age", "handle")
        for topic in (Topic.ORDER_STATUSES, Topic.DELIVERY_LOCATIONS)
    }


# ---------------------------------------------------------------------------- watchers


def seed_watched(count: int, mode: str) -> list[tuple[int, str]]:
    """``count`` fresh orders, each of a watcher customer of its own: (order id, the
    customer's API token). Each watcher is a user, as real ones are: one socket, one poll a
    second, within every per-user limit (``WS_MAX_SOCKETS_PER_USER``, ``WS_CONNECT_RATE``,
    ``API_THROTTLE_READS``)."""
    from tracker.orders import services
    from tracker.restaurants.models import Restaurant

    restaurant = Restaurant.objects.order_by("id").first()
    product = restaurant.products.order_by("id").first()
    return [
        (
            services.place_order(
                customer=customer,
                restaurant=restaurant,
                items=[services.ItemRequest(product.pk, 1)],
                delivery_address="watched",
                delivery_lat=12.975,
                delivery_lon=77.605,
            )[0].pk,
            token,
        )
        for customer, token in harness.bench_customers(count, f"watcher-{mode}-")
    ]


def advance(order_id: int) -> tuple[str, float]:
    """Advance one order (database + outbox, as the API does); its new status, commit time."""
    from django.db import close_old_connections

    from tracker.orders import services
    from tracker.orders.policy import SYSTEM

    order = services.advance_order(order_id, by=SYSTEM, via="bench")
    committed = time.perf_counter()
    close_old_connections()
    return order.status, committed


def fast_path_stages(changes: list[tuple], produced: dict, followed: dict) -> dict:
    """Where each fast-path change spent its time, from the records' produce times.

    A status: accepted -> the API answered (the database commit and its outbox row),
    -> the relay produced it to order_statuses, -> its socket got it. A GPS point is
    timed from the API's 202 (the broker has it), so its first stage is the bridge.
    ``followed_ms`` is produce -> the benchmark's own consumer of the topic: a change
    late there too was late out of the broker, one late only on the socket was late in
    the web process. Also the ten slowest changes with their stages and accept time, to
    say where a tail comes from."""
    rows = []
    for kind, order, what, accepted, answered, first in changes:
        topic = Topic.ORDER_STATUSES if kind == "status" else Topic.DELIVERY_LOCATIONS
        made = produced.get((topic, order, what))
        if made is None:
            continue
        after_accept = made - accepted
        row = {
            "kind": kind,
            "order": order,
            "accepted_at": accepted,
            "total_ms": first * 1000,
            "answered_ms": answered * 1000,
            "produced_ms": after_accept * 1000,
            "to_socket_ms": (first - after_accept) * 1000,
        }
        if (key := (topic, order, what)) in followed:
            row["followed_ms"] = (followed[key] - made) * 1000
        rows.append(row)
    stages = {}
    for kind in ("status", "gps"):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        stages[kind] = {
            name: summary([r[name] / 1000 for r in mine if name in r])
            for name in ("answered_ms", "produced_ms", "followed_ms", "to_socket_ms", "total_ms")
        }
    stages["slowest"] = sorted(rows, key=lambda r: -r["total_ms"])[:10]
    return stages


class StageFollower:
    """Follows the fast paths' topics while a level runs and keeps when each probe
    order's record was produced (:func:`note_produced`) and when this follower got it."""

    def __init__(self, topics: tuple[Topic, ...], orders: set[int]) -> None:
        self.first: dict = {}
        #: the same keys -> when this follower got the record (wall clock, s): beside the
        #: socket's time, whether a late record was late out of the broker or the web
        self.received: dict = {}
        self._orders = orders
        self._stop = threading.Event()
        ends = harness.offsets(topics)
        self._threads = [
            threading.Thread(target=self._follow, args=(topic, ends[topic]), daemon=True)
            for topic in topics
        ]
        for thread in self._threads:
            thread.start()

    def _follow(self, topic: Topic, start: dict) -> None:
        from runtime import kafka

        while not self._stop.is_set():
            try:
                for record in kafka.iter_topic(topic, start=start, follow=True, stop=self._stop):
                    start[record.partition] = record.offset + 1
                    key = record.key.decode() if record.key else ""
                    if key.isdigit() and int(key) not in self._orders:
                        continue  # another order's: not parsed (GPS points are many)
                    noted = note_produced(self.first, topic, record, self._orders)
                    if noted is not None:
                        self.received.setdefault(noted, time.time())
            except Exception as exc:  # noqa: BLE001 - a broker hiccup must not end the run
                print(f"  stage follower of {topic}: {exc!r}; following again", flush=True)
                self._stop.wait(0.5)

    def stop(self) -> tuple[dict, dict]:
        """Stop following; (topic, order, status or latitude) -> produce time (s), and ->
        this follower's receipt (s)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        return self.first, self.received


def note_produced(
    first: dict, topic: Topic, record: ConsumerRecord, orders: set[int]
) -> tuple | None:
    """Keep when ``record`` was produced (wall clock, s), if it is one of ``orders``'s:
    under (topic, order, status), or (topic, order, latitude) for a GPS point, the first
    time is kept. The relay produces order_statuses, the stream job orders_enriched.
    Returns the key, or None for another order's record."""
    from contract.events import DeliveryLocation, parse_event

    event = parse_event(topic, record.value)
    if event.order_id not in orders:
        return None
    what = event.lat if isinstance(event, DeliveryLocation) else event.status
    key = (topic, event.order_id, what)
    first.setdefault(key, record.timestamp / 1000)
    return key


def stage_times(start: dict, orders: set[int]) -> dict:
    """:func:`note_produced` over the records after ``start`` (topic -> offsets)."""
    from runtime import kafka

    first: dict = {}
    for topic, offsets in start.items():
        for record in kafka.iter_topic(topic, start=offsets, idle_timeout=1.0, max_wait=60):
            note_produced(first, topic, record, orders)
    return first


async def watch_phase(
    mode: str, watched: list[tuple[int, str]], ports: dict, pids: dict, args
) -> dict:
    """One phase: N watchers of ``mode`` while the benchmark changes their orders, each
    watcher its order's customer."""
    from concurrent.futures import ThreadPoolExecutor

    from websockets.asyncio.client import connect as ws_connect

    from contract.events import status_rank

    seen: list[
        tuple[int, str, float]
    ] = []  # (order, status, when) each time a watcher's view moves
    stop = asyncio.Event()
    polls = {"done": 0, "failed": 0}
    orders = [order_id for order_id, _ in watched]
    tokens = dict(watched)
    headers = {order_id: {"Authorization": f"Token {token}"} for order_id, token in watched}

    async def push_watcher(ws, order_id: int) -> None:
        async for raw in ws:
            message = json.loads(raw)
            # The first message showing the new status: the fast path's ``status``
            # (no version) or the enriched ``update``, whichever comes first.
            if message.get("type") == "status" or (
                message.get("type") == "update" and message["kind"] == "status"
            ):
                seen.append((order_id, message["status"], time.perf_counter()))

    async def poll_watcher(port: int, path: str, order_id: int) -> None:
        conn, host, last = None, f"127.0.0.1:{port}", None
        next_at = time.perf_counter() + random.random()  # watchers' phases are random
        try:
            while not stop.is_set():
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                try:
                    conn = conn or await harness.Connection.open("127.0.0.1", port)
                    status, keep, body = await conn.get(host, path, tokens[order_id])
                except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                    polls["failed"] += 1
                    keep, status = False, 0
                if not keep and conn:
                    conn.close()
                    conn = None
                if status == 200:
                    polls["done"] += 1
                    now = json.loads(body)["status"]
                    if now != last:
                        seen.append((order_id, now, time.perf_counter()))
                        last = now
                elif status:
                    polls["failed"] += 1
                # Every second on the clock; a reply later than that skips the missed ticks.
                next_at += max(1.0, math.ceil(time.perf_counter() - next_at))
        finally:
            if conn:
                conn.close()

    sockets, tasks = [], []
    if mode == "idle":
        # One socket, so the push bridge runs: in production it always does (its own
        # process), and its cost of following the topics is not any watcher's.
        sockets.append(
            await ws_connect(
                f"ws://127.0.0.1:{ports['web']}/ws/orders/{orders[0]}/",
                additional_headers=headers[orders[0]],
                ping_interval=None,
            )
        )
        await sockets[0].recv()  # the snapshot
    elif mode == "push":
        for chunk in range(0, len(orders), 100):
            opened = await asyncio.gather(
                *(
                    ws_connect(
                        f"ws://127.0.0.1:{ports['web']}/ws/orders/{o}/",
                        additional_headers=headers[o],
                        max_queue=None,
                        open_timeout=120,
                        ping_interval=None,
                    )
                    for o in orders[chunk : chunk + 100]
                )
            )
            for ws in opened:
                await ws.recv()  # the snapshot
            sockets += opened
        tasks = [
            asyncio.create_task(push_watcher(ws, o)) for ws, o in zip(sockets, orders, strict=True)
        ]
    elif mode == "rest_polling":
        path = "/api/v1/orders/{}/"
        tasks = [asyncio.create_task(poll_watcher(ports["web"], path.format(o), o)) for o in orders]
    await asyncio.sleep(2)  # every watcher has its first view

    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(1)
    changed: list[tuple[int, str, float]] = []
    steps_left = dict.fromkeys(orders, 5)  # PLACED -> ... -> ARRIVING_AT_DOOR
    rng = random.Random(7)
    offsets = await asyncio.to_thread(
        harness.offsets, (Topic.ORDER_STATUSES, Topic.ORDERS_ENRICHED)
    )
    wall_minus_perf = time.time() - time.perf_counter()
    cpu_before = harness.cpu_of(pids)
    client_before, start = time.process_time(), time.perf_counter()
    polls_before = dict(polls)
    next_at = start
    while next_at < start + args.watch_seconds:
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        next_at += 1.0 / args.changes
        candidates = [o for o, left in steps_left.items() if left]
        if not candidates:
            break
        order_id = rng.choice(candidates)
        steps_left[order_id] -= 1
        status, committed = await loop.run_in_executor(executor, advance, order_id)
        changed.append((order_id, status, committed))
    elapsed = time.perf_counter() - start
    cpu = {name: cpu - cpu_before[name] for name, cpu in harness.cpu_of(pids).items()}
    client_cpu = time.process_time() - client_before
    polls_in_window = {k: v - polls_before[k] for k, v in polls.items()}
    await asyncio.sleep(args.grace)  # the last changes reach the watchers
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    executor.shutdown()

    # A change is fresh for a watcher once it shows that status or a later one.
    views: dict[int, list[tuple[float, int]]] = {}
    for order_id, status, when in seen:
        views.setdefault(order_id, []).append((when, status_rank(status)))
    produced = await asyncio.to_thread(stage_times, offsets, set(orders))
    latencies, missed = [], 0
    stages: dict[str, list[float]] = {
        "relay": [],
        "stream": [],
        "to_watcher": [],
        "relayed_to_watcher": [],
    }
    for order_id, status, committed in changed:
        rank = status_rank(status)
        shown = [when for when, r in views.get(order_id, []) if r >= rank]
        if shown:
            latencies.append(max(0.0, min(shown) - committed))
        else:
            missed += 1
        # Where the time goes: commit -> order_statuses (outbox relay) -> orders_enriched
        # (stream job) -> the watcher sees it (push bridge, or Pinot ingest + the poll).
        # The push fast path skips the stream job: order_statuses -> the watcher.
        relayed = produced.get((Topic.ORDER_STATUSES, order_id, status))
        enriched = produced.get((Topic.ORDERS_ENRICHED, order_id, status))
        if relayed is not None and shown:
            stages["relayed_to_watcher"].append(min(shown) + wall_minus_perf - relayed)
        if relayed is not None and enriched is not None:
            stages["relay"].append(relayed - (committed + wall_minus_perf))
            stages["stream"].append(enriched - relayed)
            if shown:
                stages["to_watcher"].append(min(shown) + wall_minus_perf - enriched)
    return {
        "mode": mode,
        "watchers": len(orders) if mode != "idle" else 0,
        "seconds": elapsed,
        "changes": len(changed),
        "freshness": summary(latencies),
        "stages_p50_ms": {k: harness.percentile(v, 50) * 1000 for k, v in stages.items()},
        "missed": missed,
        "polls_per_second": polls_in_window["done"] / elapsed,
        "failed_polls": polls_in_window["failed"],
        "server_cpu_seconds": cpu,
        "load_generator_cpu_seconds": client_cpu,
    }


def one_watchers(count: int, args) -> dict:
    """Every phase for ``count`` watchers, on one system."""
    import httpx

    supervisor = harness.start_full_system(args.watch_multiple)
    base = supervisor.web_url
    try:
        time.sleep(args.warmup)
        modes = ["idle", "push", "rest_polling"]
        sets = {mode: seed_watched(count, mode) for mode in modes}
        last = [watched[-1] for watched in sets.values()]
        deadline = time.monotonic() + 300
        for order_id, token in last:  # Pinot has every phase's orders before anything is measured
            while time.monotonic() < deadline:
                reply = httpx.get(
                    f"{base}/api/v1/orders/{order_id}/",
                    headers={"Authorization": f"Token {token}"},
                    timeout=30,
                )
                if reply.status_code == 200 and reply.json()["tracking"]["source"] == "pinot":
                    break
                time.sleep(1.0)  # as the watcher's app polls: inside its read budget
        pids = {name: supervisor.pid(name) for name in ("web", "pinot")}
        ports = {"web": int(base.rsplit(":", 1)[1])}
        import uvloop

        phases = [uvloop.run(watch_phase(mode, sets[mode], ports, pids, args)) for mode in modes]
    finally:
        supervisor.stop()
    idle = phases[0]
    for phase in phases:
        spent = sum(phase["server_cpu_seconds"].values())
        idle_spent = sum(idle["server_cpu_seconds"].values()) * phase["seconds"] / idle["seconds"]
        minutes = phase["seconds"] / 60
        phase["server_cpu_seconds_total"] = spent
        phase["cpu_seconds_per_watcher_minute"] = (
            (spent - idle_spent) / (count * minutes) if phase["watchers"] else None
        )
        phase["cpu_seconds_per_watcher_minute_raw"] = (
            spent / (count * minutes) if phase["watchers"] else None
        )
        # A saturated server answers fewer polls than asked for: the cost of one poll,
        # times 60, is what a watcher polling every second really costs.
        polls = phase["polls_per_second"] * phase["seconds"]
        phase["cpu_ms_per_poll"] = (spent - idle_spent) * 1000 / polls if polls else None
    return {"watchers": count, "multiple": args.watch_multiple, "phases": phases}


def print_watchers(level: dict) -> None:
    rows = []
    for phase in level["phases"]:
        fresh = phase["freshness"]
        per = phase["cpu_seconds_per_watcher_minute"]
        watched = phase["watchers"] > 0
        per_poll = phase["cpu_ms_per_poll"]
        rows.append(
            (
                phase["mode"],
                f"{fresh['n']}/{phase['changes']}" if watched else "-",
                f"{fresh['p50_ms']:.0f}" if watched else "-",
                f"{fresh['p99_ms']:.0f}" if watched else "-",
                f"{phase['server_cpu_seconds_total'] / phase['seconds']:.2f}",
                "-" if per is None else f"{per:.3f}",
                f"{phase['polls_per_second']:.0f}",
                "-" if per_poll is None else f"{per_poll:.1f}",
                f"{phase['load_generator_cpu_seconds'] / phase['seconds']:.2f}",
            )
        )
    harness.print_table(
        f"{level['watchers']} watchers, {level['multiple']:g}x background load",
        rows,
        header=(
            "design", "seen/changes", "p50 ms", "p99 ms", "server cores",
            "CPU s/watcher-min", "polls/s", "CPU ms/poll", "load gen cores",
        ),
    )  # fmt: skip
    by = {p["mode"]: p for p in level["phases"]}
    push = by["push"]
    other = by["rest_polling"]
    fresher = other["freshness"]["p50_ms"] / max(push["freshness"]["p50_ms"], 1e-9)
    cheaper = (other["cpu_seconds_per_watcher_minute"] or 0) / max(
        push["cpu_seconds_per_watcher_minute"] or 0, 1e-9
    )
    print(f"  push vs REST polling: {fresher:.1f}x fresher at p50, {cheaper:.1f}x less CPU/watcher")
    for phase in level["phases"][1:]:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in phase["stages_p50_ms"].items())
        print(f"  {phase['mode']}: p50 ms per stage: {stages}")


OPTIONS = {
    "--multiples": "1,10,100",
    "--probes": 20,
    "--warmup": (30.0, "seconds of load before probing"),
    "--gps-points": (5, "GPS points per probe order"),
    "--rest-poll": (0.02, "seconds between the REST visibility reads"),
    "--fast-only": (False, "time only each change's first message on the socket"),
    "--watchers": ("100,1000", "watched orders per run"),
    "--watch-seconds": (60.0, "seconds per phase"),
    "--changes": (2.0, "status changes per second"),
    "--watch-multiple": (1.0, "background load"),
    "--grace": (15.0, "wait for the last changes"),
}


def run(args: argparse.Namespace) -> dict:
    levels, watchers = [], []
    for count in [int(n) for n in args.watchers.split(",") if n]:
        watchers.append(harness.in_fresh_process(one_watchers, count, args))
        print_watchers(watchers[-1])
    for multiple in (float(m) for m in args.multiples.split(",") if m):
        level = harness.in_fresh_process(
            one_level, multiple, args.probes, args.warmup, args.gps_points, args.rest_poll,
            args.fast_only,
        )  # fmt: skip
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
                ("accepted -> WebSocket push (update)", level["websocket"]),
                ("status accepted -> socket, old (update)", level["socket"]["status_old"]),
                ("status accepted -> socket, new (first message)", level["socket"]["status_new"]),
                ("GPS accepted -> socket, old (update)", level["socket"]["gps_old"]),
                ("GPS accepted -> socket, new (first message)", level["socket"]["gps_new"]),
                ("poll REST (Pinot) every 1 s", level["rest_polling"]),
            )
        ]
        harness.print_table(
            f"Freshness at {Load(multiple).describe()}",
            rows, header=("path", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"),
        )  # fmt: skip
        push = level["websocket"]
        polled = level["rest_polling"]
        if push["p50_ms"]:
            print(
                f"  REST polling / push: p50 {polled['p50_ms'] / push['p50_ms']:.1f}x, "
                f"p99 {polled['p99_ms'] / max(push['p99_ms'], 1):.1f}x"
            )
        stages = level["fast_path_stages"]
        for kind in ("status", "gps"):
            if kind in stages:
                print(
                    f"  {kind} fast path, p50 / p99 ms from accept: "
                    + ", ".join(
                        f"{name[:-3]} {v['p50_ms']:.0f} / {v['p99_ms']:.0f}"
                        for name, v in stages[kind].items()
                    )
                )
        for series, figures in level.get("bridge", {}).items():
            print(f"  bridge {series}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
        if "kafka_disk_mb" in level:
            print(f"  Kafka's log on disk at the level's end: {level['kafka_disk_mb']} MiB")
        for row in stages.get("slowest", [])[:5]:
            print(
                f"  slow {row['kind']}: "
                + ", ".join(f"{k} {v:.0f}" for k, v in row.items() if k.endswith("_ms"))
            )
        print(
            "  RSS MiB: "
            + ", ".join(f"{k}={v:.0f}" for k, v in level["rss_mb"].items())
            + f"; errors={level['errors']}"
        )
    return {"levels": levels, "watchers": watchers}

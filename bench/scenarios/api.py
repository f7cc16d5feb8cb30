"""API latency and cost: closed-loop concurrency per endpoint, or an open-loop order-detail
load at a fixed rate with the server CPU each request costs.

Every read is a real client's, within its user's read budget (``API_THROTTLE_READS``):
customers read their own orders, dealt over as many users as the rate takes
(``harness.readers_for``); a 429 is an error. Open-loop latencies count from each
request's scheduled send time, so queueing counts; CPU per request is each process's CPU
over the run less its idle CPU, over the requests answered.

* no ``--rate``: closed loop, ``--clients`` per endpoint, on ``--orders`` seeded orders;
* ``--rate``: open loop on the seeded stack (Kafka, Pinot, the web), the pipeline idle;
* ``--rate --multiple N``: beside the whole system, the simulator at N x the book's peak;
* ``--rate --production``: against ``make run-prod`` (PostgreSQL, Redis, the pushbridge);
* ``--rate --conditional``: plain against ``If-None-Match`` polls, alternating rounds.

    .venv/bin/python -m bench api --rate 200 --seconds 40
    .venv/bin/python -m bench api --rate 200 --seconds 60 --multiple 10
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import time
from urllib.parse import urlsplit

from bench import harness
from contract.events import LIFECYCLE, OrderStatus
from contract.load import Load

STATUSES = [s.value for s in LIFECYCLE]
ON_THE_ROAD = STATUSES.index(OrderStatus.OUT_FOR_DELIVERY.value) + 1
#: GPS points of a seeded order on the road (one every 4 s, as the simulator sends them).
TRAIL_POINTS = 40


def seed(orders: int, customers: int, operators: int = 1) -> dict:
    """Orders in the database and their enriched history in Pinot, placed by ``customers``
    customers (each at least one) with an API token each, and ``operators`` operators'
    tokens: enough users to read at the benchmark's rate within their budgets."""
    from contract.events import now_ms, status_time_field
    from runtime import kafka
    from tests.factories import make_courier, make_restaurant, place
    from tests.fixtures_pinot import delivery_event, item_event, order_event
    from tracker.orders.models import Order

    if orders < customers:
        raise SystemExit(f"--orders {orders}: {customers} customers each need an order")
    rng = random.Random(7)
    people = harness.bench_customers(customers, "c")
    tokens = {c.pk: key for c, key in people}
    restaurants = [make_restaurant(f"R{i}") for i in range(8)]
    rider = make_courier("bench-rider")  # carries every order on the road
    ids, owners = [], {}
    for n in range(orders):
        customer = people[n][0] if n < customers else rng.choice(people)[0]
        order = place(customer, rng.choice(restaurants))
        ids.append(order.pk)
        owners[order.pk] = (customer, order.restaurant_id)
    sent = kafka.Deliveries(kafka.producer(**{"linger.ms": 20}))
    now = now_ms()
    carried = []
    for order_id in ids:
        customer, restaurant_id = owners[order_id]
        created = now - rng.randrange(1, 7 * 24 * 3600) * 1000
        reached = rng.randrange(1, len(STATUSES) + 1)
        times = {}
        for version, status in enumerate(STATUSES[:reached], start=1):
            times[status] = created + version * 60_000
        version, courier = reached, None
        if reached >= ON_THE_ROAD:  # on the road or delivered: a courier trail
            left = times[STATUSES[ON_THE_ROAD - 1]]
            for point in range(TRAIL_POINTS):
                version += 1
                lat, lon, at = 12.97 - point * 0.0004, 77.60 + point * 0.0003, left + point * 4000
                point_event = delivery_event(
                    order_id, version, lat, lon, at=at, courier_id=rider.pk,
                    restaurant_id=restaurant_id,
                )  # fmt: skip
                sent.publish(point_event)
            courier = (rider.pk, lat, lon, at)
            carried.append(order_id)
        status = STATUSES[reached - 1]
        sent.publish(
            order_event(order_id, version, status, customer_id=customer.pk,
                        restaurant_id=restaurant_id, created_at=created,
                        status_time=times[status], status_times=times, courier=courier),
        )  # fmt: skip
        sent.publish(
            item_event(
                order_id, 1, rng.choice(["Margherita", "Pepsi", "Tiramisu"]), 2, 8.5,
                restaurant_id=restaurant_id, at=created,
            ),
        )  # fmt: skip
        sent.producer.poll(0)
    sent.flush(60)
    Order.objects.filter(pk__in=carried).update(courier=rider)  # as the database has it
    return {
        "ids": ids,
        "operators": harness.operators(operators),
        "customers": list(tokens.values()),
        "details": [(i, tokens[owners[i][0].pk]) for i in ids],
        "status_time_field": status_time_field,
    }


async def hammer(base: str, name: str, make_request, clients: int, seconds: float) -> dict:
    import httpx

    latencies: list[float] = []
    errors = throttled = 0
    deadline = time.monotonic() + seconds

    async def client_loop(client):
        nonlocal errors, throttled
        while time.monotonic() < deadline:
            method, path, token = make_request()
            start = time.perf_counter()
            response = await client.request(
                method, path, headers={"Authorization": f"Token {token}"}
            )
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                errors += 1
                throttled += response.status_code == 429

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        started = time.monotonic()
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
        elapsed = time.monotonic() - started
    return {
        "endpoint": name,
        "requests": len(latencies),
        "errors": errors,
        "throttled": throttled,
        "rps": len(latencies) / elapsed,
        "p50_ms": harness.percentile(latencies, 50) * 1000,
        "p99_ms": harness.percentile(latencies, 99) * 1000,
    }


# ---------------------------------------------------------------------- open loop


async def open_loop(
    url: str, requests: list[tuple], rate: float, max_connections: int = 256,
    timeout: float = 30.0, headers: dict[str, str] | None = None,
) -> dict:  # fmt: skip
    """Send ``requests`` (path, token[, etag]) at ``rate`` per second from now; each latency
    is from the request's scheduled time to its last response byte. Each user (token)
    keeps its own connections, as each customer's app does: one shared pool would send
    most requests down the one connection it reuses most, to whichever web worker
    accepted it. ``headers`` go with every request (``Host`` among them replaces the
    URL's: the production run is reached on loopback as the proxy reaches it)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    headers = dict(headers or {})
    http_host = headers.pop("Host", host)
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    loop = asyncio.get_running_loop()
    idle_by_user: dict[str, list[harness.Connection]] = {}
    opened = 0
    free = asyncio.Condition()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    received = {"bytes": 0, "not_modified": 0, "ok": 0}

    async def connection(user: str, fresh: bool = False) -> harness.Connection:
        nonlocal opened
        async with free:
            while not fresh and not idle_by_user.get(user) and opened >= max_connections:
                if not _close_one_idle():
                    await free.wait()
            if idle_by_user.get(user) and not fresh:
                return idle_by_user[user].pop()
            opened += 1
        try:
            return await harness.Connection.open(host, port)
        except BaseException:  # refused, or cancelled by the timeout: the slot is free again
            opened -= 1
            raise

    def _close_one_idle() -> bool:
        """At the connection cap: close another user's idle connection for a new one."""
        nonlocal opened
        for conns in idle_by_user.values():
            if conns:
                conns.pop().close()
                opened -= 1
                return True
        return False

    async def release(user: str, conn: harness.Connection | None) -> None:
        nonlocal opened
        async with free:
            if conn is None:
                opened -= 1
            else:
                idle_by_user.setdefault(user, []).append(conn)
            free.notify()

    async def one(path: str, token: str, at: float, etag: str | None = None) -> None:
        nonlocal opened
        conn = None
        try:
            conn = await asyncio.wait_for(connection(token), timeout)
            try:
                status, keep, body = await asyncio.wait_for(
                    conn.get(http_host, path, token, etag, extra), timeout
                )
            except harness.ConnectionClosedIdle:
                # As HTTP clients do: send again on a new connection (in the closed one's
                # slot); the latency still counts from the scheduled time.
                conn.close()
                conn = await asyncio.wait_for(connection(token, fresh=True), timeout)
                async with free:
                    opened -= 1  # the closed connection's slot went to the new one
                status, keep, body = await asyncio.wait_for(
                    conn.get(http_host, path, token, etag, extra), timeout
                )
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            if conn is not None:
                conn.close()
                await release(token, None)
            return
        latencies.append(loop.time() - at)
        received["bytes"] += len(body)
        received["not_modified"] += status == 304
        received["ok"] += status == 200
        if status not in (200, 304):
            errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
        if not keep:
            conn.close()
            conn = None
        await release(token, conn)

    cpu_before = time.thread_time()
    start = loop.time() + 0.05
    tasks = []
    for i, request in enumerate(requests):
        at = start + i / rate
        if (delay := at - loop.time()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(*request[:2], at, *request[2:])))
    await asyncio.gather(*tasks)
    elapsed = loop.time() - start
    generator_cpu = time.thread_time() - cpu_before
    for conns in idle_by_user.values():
        for conn in conns:
            conn.close()
    return {
        "requests": len(requests),
        "answered": len(latencies),
        "errors": errors,
        "seconds": elapsed,
        "p50_ms": harness.percentile(latencies, 50) * 1000,
        "p90_ms": harness.percentile(latencies, 90) * 1000,
        "p99_ms": harness.percentile(latencies, 99) * 1000,
        "max_ms": max(latencies, default=0.0) * 1000,
        "connections": opened,
        "generator_cpu_s": generator_cpu,
        **received,
    }


def run_open_loop(
    url: str, requests: list[tuple[str, str]], rate: float, headers: dict[str, str] | None = None
) -> dict:
    """:func:`open_loop` on uvloop when it is there (a cheaper generator)."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(open_loop(url, requests, rate, headers=headers))


def measured(
    pids: dict[str, int], url: str, requests: list, rate: float, idle_cpu: dict,
    headers: dict[str, str] | None = None,
) -> dict:  # fmt: skip
    """One open-loop run with each process's CPU per answered request (less idle CPU), and
    the requests each web worker answered."""
    before = harness.cpu_of(pids)
    counted, sources = harness.requests_by_worker(pids["web"]), harness.state_reads(pids["web"])
    result = run_open_loop(url, requests, rate, headers)
    used = {name: cpu - before[name] for name, cpu in harness.cpu_of(pids).items()}
    after = harness.requests_by_worker(pids["web"])
    result["requests_by_worker"] = {
        str(pid): n - counted.get(pid, 0) for pid, n in sorted(after.items())
    }
    result["state_reads"] = {
        source: n - sources.get(source, 0)
        for source, n in sorted(harness.state_reads(pids["web"]).items())
    }
    answered = max(1, result["answered"])
    result["cpu_s"] = used
    result["cpu_ms_per_request"] = {
        name: max(0.0, used[name] - idle_cpu.get(name, 0.0) * result["seconds"]) / answered * 1000
        for name in pids
    }
    result["generator_cpu_share"] = result["generator_cpu_s"] / result["seconds"]
    return result


def idle_cpu_rates(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU seconds per second each process uses with no requests (ingestion, push)."""
    before = harness.cpu_of(pids)
    time.sleep(seconds)
    return harness.cores(before, harness.cpu_of(pids), seconds)


def detail_requests(details: list[tuple[int, str]], n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` order details, each asked by the order's own customer (one of theirs at random),
    the customers taking turns (:func:`harness.dealt`): at a rate, each reads rate /
    customers a second."""
    rng = random.Random(seed)
    orders: dict[str, list[int]] = {}
    for order_id, token in details:
        orders.setdefault(token, []).append(order_id)
    return [
        (f"/api/v1/orders/{rng.choice(orders[token])}/", token)
        for token in harness.dealt(list(orders), n, seed)
    ]


def list_requests(tokens: list[str], n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` reads of "my orders", the customers taking turns (:func:`harness.dealt`)."""
    return [("/api/v1/orders/?limit=20", token) for token in harness.dealt(tokens, n, seed)]


def with_etags(url: str, requests: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Each request with the ETag of the answer its client has now (read once per client)."""
    import httpx

    tags: dict[tuple[str, str], str] = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for path, token in set(requests):
            answer = client.get(path, headers={"Authorization": f"Token {token}"})
            tags[path, token] = answer.headers["ETag"]
    return [(path, token, tags[path, token]) for path, token in requests]


def open_loop_conditional(args: argparse.Namespace) -> dict:
    """Plain and conditional polls of the detail and the list, alternating rounds."""
    with harness.system(["kafka", "pinot", "web"], env={"WEB_WORKERS": str(args.workers)}) as stack:
        readers = harness.readers_for(args.rate)
        data = seed(args.orders, customers=readers)
        harness.wait_pinot_caught_up()
        warm_up(stack.web_url, data["details"])
        pids = {"web": stack.pid("web"), "pinot": stack.pid("pinot")}
        idle = idle_cpu_rates(pids, 2.0)
        per_round = max(1, int(args.rate * args.seconds / args.rounds))
        first: dict[str, int] = {}
        for order_id, token in data["details"]:
            first.setdefault(token, order_id)
        pollers = [(order_id, token) for token, order_id in first.items()]  # one order each
        cases = {
            "detail": lambda r: detail_requests(pollers, per_round, seed=r),
            "my orders": lambda r: list_requests(data["customers"], per_round, seed=r),
        }
        runs: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            for name, make in cases.items():
                plain = make(r)
                variants = {name: plain, f"{name}, If-None-Match": None}
                for label in variants if r % 2 == 0 else reversed(variants):
                    requests = variants[label] or with_etags(stack.web_url, plain)
                    run = measured(pids, stack.web_url, requests, args.rate, idle)
                    runs.setdefault(label, []).append(run)
    results = {}
    for label, rs in runs.items():
        results[label] = combine(rs)
        results[label]["not_modified"] = sum(r["not_modified"] for r in rs)
        results[label]["bytes_per_answer"] = sum(r["bytes"] for r in rs) / max(
            1, sum(r["answered"] for r in rs)
        )
    return {"load": f"seeded, {args.orders} orders, pipeline idle", "results": results}


def print_conditional(args: argparse.Namespace, result: dict) -> None:
    rows = [
        (
            label,
            f"{r['answered']}/{r['requests']}",
            f"{r['not_modified'] / max(1, r['answered']) * 100:.0f}%",
            f"{r['bytes_per_answer']:.0f}",
            f"{r['p50_ms']:.1f}",
            f"{r['p90_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['cpu_ms_per_request']['web']:.2f}",
            f"{r['cpu_ms_per_request']['pinot']:.2f}",
            str(sum(r["errors"].values())),
        )
        for label, r in result["results"].items()
    ]
    harness.print_table(
        f"Open loop at {args.rate:g}/s, plain vs conditional polls, {result['load']}, "
        f"{args.workers} web worker(s)",
        rows,
        header=("request", "answered", "304", "body bytes", "p50 ms", "p90 ms", "p99 ms",
                "web CPU ms/req", "Pinot CPU ms/req", "errors"),
    )  # fmt: skip


def warm_up(
    url: str, details: list[tuple[int, str]], passes: int = 3, rate: float = 100.0,
    headers: dict[str, str] | None = None,
) -> None:  # fmt: skip
    """Every worker imported, connected and cached before anything is measured: each
    order read ``passes`` times (by its customer, in random order), so each web worker
    has most likely read it once, as a system that has been serving for a while has."""
    requests = [(f"/api/v1/orders/{order_id}/", token) for order_id, token in details] * passes
    random.Random(0).shuffle(requests)
    n = len(requests)
    result = run_open_loop(url, requests, rate, headers)
    failed = sum(result["errors"].values())
    if failed > n // 10:
        raise SystemExit(f"warm-up failed against {url}: {result['errors']}")
    if failed:  # a cold system at 100/s: reported, not measured
        print(f"warm-up against {url}: {result['errors']} of {n}", flush=True)


def open_loop_seeded(args: argparse.Namespace) -> dict:
    with harness.system(["kafka", "pinot", "web"], env={"WEB_WORKERS": str(args.workers)}) as stack:
        data = seed(args.orders, customers=harness.readers_for(args.rate))
        harness.wait_pinot_caught_up()
        warm_up(stack.web_url, data["details"])
        pids = {"web": stack.pid("web"), "pinot": stack.pid("pinot")}
        idle = idle_cpu_rates(pids, 2.0)
        requests = detail_requests(data["details"], max(1, int(args.rate * args.seconds)), seed=0)
        run = measured(pids, stack.web_url, requests, args.rate, idle)
        rss = {name: harness.process_tree_rss(pid) for name, pid in pids.items()}
    return {
        "load": f"seeded, {args.orders} orders, pipeline idle",
        "results": {"new": combine([run])},
        "rss_mb": rss,
    }


def beside_the_pipeline(
    args: argparse.Namespace, pids: dict[str, int], url: str, headers: dict[str, str] | None = None
) -> tuple[dict, dict]:
    """The open loop on a running system, once it has warmed up: the newest orders of as
    many of its customers as the rate takes. Returns the result and each part's RSS."""
    time.sleep(args.warmup)
    details = harness.customer_orders(harness.readers_for(args.rate))
    # Beside the pipeline at 10x, first reads (each a Pinot query) at 100/s time out:
    # the warm-up goes gently, as clients arriving over a few minutes would.
    warm_up(url, details, rate=20.0, headers=headers)
    idle = idle_cpu_rates(pids, args.idle_seconds)
    requests = detail_requests(details, int(args.rate * args.seconds), seed=1)
    result = measured(pids, url, requests, args.rate, idle, headers)
    result["idle_cpu_s_per_s"] = idle
    return result, {name: harness.process_tree_rss(pid) for name, pid in pids.items()}


def open_loop_system(args: argparse.Namespace) -> dict:
    supervisor = harness.start_full_system(args.multiple, args.rate)
    try:
        pids = {name: supervisor.pid(name) for name in ("web", "pinot", "streaming", "kafka")}
        result, rss = beside_the_pipeline(args, pids, supervisor.web_url)
    finally:
        supervisor.stop()
    return {"load": f"full system, simulator at {Load(args.multiple).describe()}",
            "results": {"new": result}, "rss_mb": rss}  # fmt: skip


#: The production run's processes whose CPU a read is charged with, by the name the
#: table uses (``pinot-broker`` is ``python -m localrun.pinot``: every Pinot JVM).
PRODUCTION_PARTS = {
    "web": "web", "pinot": "pinot-broker", "pushbridge": "pushbridge", "redis": "redis",
    "postgres": "postgres",
}  # fmt: skip


def open_loop_production(args: argparse.Namespace) -> dict:
    """The open loop against ``make run-prod`` (compose's web workers behind no proxy, the
    version register in Redis written by the ``pushbridge`` process, PostgreSQL), with its
    simulator at ``--multiple`` x the book's peak (default 1x)."""
    system = harness.start_production_run(args.multiple or 1)
    try:
        # The web workers' request counts are in the run's folder (config/asgi.py).
        os.environ["ORDERTRACK_VAR_DIR"] = str(system.plan.var / "app")
        pids = {label: system.child(name).process.pid for label, name in PRODUCTION_PARTS.items()}
        harness.wait_for_operator()
        result, rss = beside_the_pipeline(
            args,
            pids,
            system.endpoint.url.replace("//localhost:", "//127.0.0.1:"),
            {"Host": "localhost", **system.endpoint.headers},
        )
    finally:
        system.stop()
    return {"load": f"make run-prod, simulator at {Load(args.multiple or 1).describe()}",
            "results": {"new": result}, "rss_mb": rss}  # fmt: skip


def combine(runs: list[dict]) -> dict:
    """Rounds of one server summed: latencies are per round, so percentiles are the worst
    round's (conservative); CPU and counts add up."""
    answered = sum(r["answered"] for r in runs)
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    names = runs[0]["cpu_ms_per_request"]
    return {
        "rounds": len(runs),
        "requests": sum(r["requests"] for r in runs),
        "answered": answered,
        "errors": errors,
        **{k: max(r[k] for r in runs) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
        "cpu_ms_per_request": {
            n: sum(r["cpu_ms_per_request"][n] * r["answered"] for r in runs) / max(1, answered)
            for n in names
        },
        "generator_cpu_share": sum(r["generator_cpu_s"] for r in runs)
        / sum(r["seconds"] for r in runs),
        "runs": runs,
    }


def print_open_loop(args: argparse.Namespace, result: dict) -> None:
    rows = []
    for label, r in result["results"].items():
        cpu = r["cpu_ms_per_request"]
        rows.append(
            (
                label,
                f"{r['answered']}/{r['requests']}",
                str(sum(r["errors"].values())),
                f"{r['p50_ms']:.1f}",
                f"{r['p90_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['max_ms']:.1f}",
                f"{cpu['web']:.2f}",
                f"{cpu['pinot']:.2f}",
                f"{cpu['web'] + cpu['pinot']:.2f}",
                f"{r['generator_cpu_share'] * 100:.0f}%",
                _kept_share(r.get("state_reads") or {}),
            )
        )
    harness.print_table(
        f"Open loop: order detail as its customer at {args.rate:g}/s, {result['load']}, "
        f"{'WEB_WORKERS' if args.multiple or args.production else args.workers} web worker(s)",
        rows,
        header=("server", "answered", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms",
                "web CPU ms/req", "Pinot CPU ms/req", "total", "generator CPU",
                "state kept"),
    )  # fmt: skip


def _kept_share(reads: dict[str, int]) -> str:
    """The share of state reads answered from a kept copy (the rest asked Pinot)."""
    total = sum(reads.values())
    return f"{reads.get('kept', 0) / total * 100:.0f}%" if total else "-"


#: The most requests a second the closed loop is taken to get answered (more than one
#: machine serves): its reads are spread over enough users for that many.
CLOSED_LOOP_CEILING = 1000


def closed_loop(args: argparse.Namespace) -> dict:
    with harness.system(["kafka", "pinot", "web"], env={"WEB_WORKERS": str(args.workers)}) as stack:
        data = seed(
            args.orders,
            customers=harness.readers_for(CLOSED_LOOP_CEILING),
            operators=harness.readers_for(CLOSED_LOOP_CEILING, staff=True),
        )
        harness.wait_pinot_caught_up()
        turns = int(CLOSED_LOOP_CEILING * args.seconds)  # more than a case can send

        def taking_turns(requests: list[tuple[str, str]]):  # noqa: ANN202 - a request maker
            sent = itertools.cycle(requests)
            return lambda: ("GET", *next(sent))

        def operators(path: str):  # noqa: ANN202 - a request maker
            return taking_turns([(path, op) for op in harness.dealt(data["operators"], turns, 3)])

        cases = {
            "order detail": taking_turns(detail_requests(data["details"], turns, seed=3)),
            "my orders": taking_turns(list_requests(data["customers"], turns, seed=3)),
            "time-in-status percentiles": operators("/api/v1/operations/time-in-status/"),
            "restaurant dashboard": operators(
                "/api/v1/operations/restaurant-dashboard/?restaurant=1"
            ),
        }
        results = [
            asyncio.run(hammer(stack.web_url, name, fn, args.clients, args.seconds))
            for name, fn in cases.items()
        ]
        server_rss = harness.process_tree_rss(stack.pid("web"))
        pinot_rss = harness.process_tree_rss(stack.pid("pinot"))
    harness.print_table(
        f"API latency, {args.clients} concurrent clients, {args.orders} orders, {args.workers} worker(s)",
        [
            (
                r["endpoint"],
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['rps']:.0f}",
                f"{r['errors']} ({r['throttled']})",
            )
            for r in results
        ],
        header=("endpoint", "p50 ms", "p99 ms", "req/s", "errors (429s)"),
    )
    print(f"  RSS after: ASGI server {server_rss:.0f} MiB (all workers), Pinot {pinot_rss:.0f} MiB")
    return {"results": results, "server_rss_mb": server_rss, "pinot_rss_mb": pinot_rss}


OPTIONS = {
    "--orders": 5000,
    "--clients": (50, "closed loop: concurrent clients"),
    "--seconds": 10.0,
    "--workers": (2, "uvicorn worker processes (make run: 2)"),
    "--rate": (float, "open loop: order details per second"),
    "--multiple": (float, "open loop beside the whole system, simulator at N x peak"),
    "--rounds": (4, "with --conditional: alternating rounds"),
    "--conditional": (False, "open loop, seeded: plain vs If-None-Match"),
    "--production": (False, "open loop against make run-prod (--multiple: its load, 1x)"),
    "--warmup": (60.0, "full system: seconds first"),
    "--idle-seconds": (10.0, "full system: idle CPU window"),
}


def run(args: argparse.Namespace) -> dict:
    if args.rate is None:
        if args.multiple:
            raise SystemExit("--multiple goes with --rate")
        return closed_loop(args)
    if args.conditional:
        if args.multiple:
            raise SystemExit("--conditional runs alone on the seeded stack")
        result = open_loop_conditional(args)
        print_conditional(args, result)
        return {"label": f"conditional-{args.rate:g}rps", **result}
    if args.production:
        result = open_loop_production(args)
    elif args.multiple:
        result = open_loop_system(args)
    else:
        result = open_loop_seeded(args)
    print_open_loop(args, result)
    where = "-prod" if args.production else f"-{args.multiple:g}x" if args.multiple else ""
    return {"label": f"open-{args.rate:g}rps{where}", **result}

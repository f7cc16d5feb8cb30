"""Long run: the whole embedded system (``make run``) at its default load for hours;
``--retention-mb`` lowers Kafka's per-partition size bound so that retention deletes
segments during the run.

Every ``--probe-every`` seconds a black-box probe goes through the public API as a
customer and an operator would: place an order, advance it to OUT_FOR_DELIVERY, post
a GPS point as its courier, and wait until both the status and the point are on an open
WebSocket and in the REST detail served from Pinot. Memory (RSS with children) is
sampled every 30 s (bench_soak's sampler), and Kafka's log on disk (``var/kafka``) with
every probe. The component logs are kept beside the result. Not a test: prints the probe table and writes bench/results/longrun-*.json.

    nice .venv/bin/python bench/bench_longrun.py --minutes 120 --retention-mb 32
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.bench_soak import MemorySampler, drain_and_count, wait_for_operator  # noqa: E402

PROBE_TIMEOUT = 60.0


def probe_people(operator) -> dict:
    """A customer of its own (so its socket sees only the probe's orders) and a restaurant."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from tracker.customers.models import Address, Customer
    from tracker.restaurants.models import Restaurant

    user, _ = get_user_model().objects.get_or_create(username="longrun-probe")
    customer, _ = Customer.objects.get_or_create(user=user)
    Address.objects.get_or_create(
        customer=customer,
        defaults={"line1": "1 Church St", "lat": 12.975, "lon": 77.605, "is_default": True},
    )
    restaurant = Restaurant.objects.filter(is_open=True).order_by("id").first()
    product = restaurant.products.filter(is_available=True).order_by("id").first()
    return {
        "customer": Token.objects.get_or_create(user=user)[0].key,
        "operator": Token.objects.get_or_create(user=operator)[0].key,
        "restaurant": restaurant.pk,
        "product": product.pk,
    }


def courier_token(order_id: int) -> str:
    """The token of the courier the system assigned (set up as the courier's app would be)."""
    from django.db import connection
    from rest_framework.authtoken.models import Token

    from tracker.orders.models import Order

    courier = Order.objects.select_related("courier__user").get(pk=order_id).courier
    key = Token.objects.get_or_create(user=courier.user)[0].key
    connection.close()
    return key


async def probe(web: str, people: dict, n: int) -> dict:
    import httpx
    import websockets

    t0 = time.monotonic()
    row: dict = {"ok": False, "step": "place"}

    def auth(role: str) -> dict:
        return {"Authorization": f"Token {people[role]}"}

    async with httpx.AsyncClient(base_url=web, timeout=30) as client:
        try:
            placed = await client.post(
                "/api/v1/orders/",
                headers=auth("customer"),
                json={
                    "restaurant_id": people["restaurant"],
                    "items": [{"product_id": people["product"], "quantity": 1}],
                    "delivery": {"address": "1 Church St", "lat": 12.975, "lon": 77.605},
                },
            )
            placed.raise_for_status()
            order_id = placed.json()["id"]
            row["order_id"] = order_id
            ws_url = web.replace("http", "ws", 1) + f"/ws/orders/{order_id}/"
            async with websockets.connect(ws_url, additional_headers=auth("customer")) as ws:
                row["step"] = "snapshot"
                snapshot = json.loads(await asyncio.wait_for(ws.recv(), PROBE_TIMEOUT))
                assert snapshot["type"] == "snapshot", snapshot
                row["step"] = "advance"
                for _ in range(4):
                    r = await client.post(
                        f"/api/v1/orders/{order_id}/advance/", headers=auth("operator")
                    )
                    r.raise_for_status()
                people["courier"] = await asyncio.to_thread(courier_token, order_id)
                point = (round(12.97 + (n % 50) * 1e-4, 6), round(77.62 + (n % 50) * 1e-4, 6))
                row["step"] = "gps"
                t_gps = time.monotonic()
                r = await client.post(
                    f"/api/v1/orders/{order_id}/locations/",
                    headers=auth("courier"),
                    json={"lat": point[0], "lon": point[1]},
                )
                row["gps_http"] = r.status_code
                r.raise_for_status()
                row["step"] = "socket"
                # As a client does: the status and the point from whichever message brings
                # them first (the fast path's ``status``/``position``, or the enriched
                # ``update``); the enriched update with both is timed on its own.
                seen = {"status": None, "position": None}
                enriched = {"status": None, "position": None}
                deadline = time.monotonic() + PROBE_TIMEOUT
                while enriched != {"status": "OUT_FOR_DELIVERY", "position": point}:
                    left = deadline - time.monotonic()
                    message = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, left)))
                    kind = message.get("type")
                    if kind not in ("update", "status", "position"):
                        continue
                    got = {"status": message.get("status")}
                    if message.get("position"):
                        got["position"] = (message["position"]["lat"], message["position"]["lon"])
                    for into in (seen, enriched) if kind == "update" else (seen,):
                        into.update({k: v for k, v in got.items() if v is not None})
                    if "socket_s" not in row and seen == {
                        "status": "OUT_FOR_DELIVERY",
                        "position": point,
                    }:
                        row["socket_s"] = round(time.monotonic() - t_gps, 2)
                row["update_s"] = round(time.monotonic() - t_gps, 2)
                row.setdefault("socket_s", row["update_s"])
            row["step"] = "rest"
            deadline = time.monotonic() + PROBE_TIMEOUT
            while True:
                r = await client.get(f"/api/v1/orders/{order_id}/", headers=auth("customer"))
                body = r.json() if r.status_code == 200 else {}
                where = body.get("position") and (body["position"]["lat"], body["position"]["lon"])
                if (
                    body.get("tracking", {}).get("source") == "pinot"
                    and body.get("status") == "OUT_FOR_DELIVERY"
                    and where == point
                ):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"REST detail: {r.status_code} {str(body)[:200]}")
                # Every 0.25 s for 5 s, then every second, as a client backs off: 75 reads
                # at most, within the customer's budget (API_THROTTLE_READS, 120/min).
                waited = time.monotonic() - (deadline - PROBE_TIMEOUT)
                await asyncio.sleep(0.25 if waited < 5 else 1.0)
            row["rest_s"] = round(time.monotonic() - t_gps, 2)
            row["ok"], row["step"] = True, "done"
        except Exception as exc:  # noqa: BLE001 - a failed probe is a result, not a crash
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    row["total_s"] = round(time.monotonic() - t0, 2)
    return row


def disk_by_folder(workdir: Path) -> dict[str, float]:
    """Disk taken now by each folder of the run's ``var/`` (Kafka's log, Pinot's segments,
    the stream job's checkpoint, the logs, the database) and in all: what retention and
    Pinot's segment flushes must keep flat."""
    folders = {p.name: common.disk_mb(p) for p in sorted(workdir.iterdir()) if p.is_dir()}
    files = sum(p.stat().st_blocks * 512 for p in workdir.iterdir() if p.is_file())
    folders["(files)"] = round(files / 1_048_576, 1)
    folders["total"] = round(sum(folders.values()), 1)
    return folders


def plateaus(series: list[dict], names: list[str], at_min: float = 90, last_min: float = 30):
    """Per component: its RSS at minute ``at_min`` and the widest departure from it over the
    last ``last_min`` minutes, in percent (the issue's bar: within 5%). None when the run
    was too short to have both."""
    if not series or series[-1]["t_s"] < max(at_min, last_min) * 60:
        return None
    mark = min(series, key=lambda row: abs(row["t_s"] - at_min * 60))
    tail = [row for row in series if row["t_s"] >= series[-1]["t_s"] - last_min * 60]
    out = {}
    for name in names:
        base = mark["rss_mb"][name]
        worst = max((abs(row["rss_mb"][name] - base) for row in tail), default=0)
        out[name] = {
            "at_mark_mb": base,
            "tail_min_mb": min(row["rss_mb"][name] for row in tail),
            "tail_max_mb": max(row["rss_mb"][name] for row in tail),
            "max_departure_pct": round(100 * worst / base, 1) if base else None,
        }
    return out


#: Set by SIGTERM/SIGINT: probing stops and the run is written as it stands (with its
#: memory series and logs), so a run stopped early still leaves its evidence.
STOP = threading.Event()


async def run_probes(web: str, people: dict, minutes: float, every: float, sampler, workdir):
    rows = []
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < minutes * 60 and not STOP.is_set():
        started = time.monotonic()
        row = await probe(web, people, n)
        row["t_min"] = round((started - t0) / 60, 1)
        row["kafka_rss_mb"] = (
            sampler.samples[-1]["rss_mb"].get("kafka") if sampler.samples else None
        )
        row["disk_mb"] = disk_by_folder(workdir)
        rows.append(row)
        print(
            f"  probe {n}: t={row['t_min']} min ok={row['ok']} step={row['step']} "
            f"socket={row.get('socket_s')} update={row.get('update_s')} rest={row.get('rest_s')} "
            f"kafka rss={row['kafka_rss_mb']} MiB, var/ {row['disk_mb']} MiB {row.get('error', '')}",
            flush=True,
        )
        n += 1
        pause = time.monotonic() + max(0.0, every - (time.monotonic() - started))
        while time.monotonic() < pause and not STOP.is_set():
            await asyncio.sleep(0.5)
    return rows


def cpu_windows(series: list[dict], names: list[str], minutes: float = 10) -> list[tuple]:
    """Cores each component used in each window, from the sampler's CPU seconds so far
    (a counter that went down belongs to a restarted process: only its own count is taken)."""

    def used(now: float, before: float) -> float:
        return now - before if now >= before else now

    def rate(row: dict, start: dict, span: float, topic: str, per: float) -> str:
        if not isinstance(row.get("records"), dict) or not isinstance(start.get("records"), dict):
            return "?"
        return f"{(row['records'][topic] - start['records'][topic]) / span * per:.0f}"

    rows, start = [], series[0] if series else None
    for row in series[1:]:
        if row["t_s"] - start["t_s"] >= minutes * 60 or row is series[-1]:
            span = row["t_s"] - start["t_s"]
            cores = [used(row["cpu_s"][n], start["cpu_s"][n]) / span for n in names]
            load = (
                rate(row, start, span, "orders", 60),
                rate(row, start, span, "order_statuses", 1),
                rate(row, start, span, "delivery_locations", 1),
            )
            rows.append(
                (f"{start['t_s'] / 60:.0f}", *load, *(f"{c:.2f}" for c in cores),
                 f"{sum(cores):.2f}")
            )  # fmt: skip
            start = row
    return rows


def main() -> None:
    parser = common.arguments(__doc__)
    parser.add_argument("--minutes", type=float, default=120)
    parser.add_argument(
        "--retention-mb",
        type=int,
        default=0,
        help="KAFKA_RETENTION_BYTES in MiB, per partition (0: the local default)",
    )
    parser.add_argument("--probe-every", type=float, default=120.0, help="seconds")
    common.add_multiple(parser)
    parser.add_argument(
        "--note", default="run on a machine shared with other work", help="how it was run"
    )
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.retention_mb:
        os.environ["KAFKA_RETENTION_BYTES"] = str(args.retention_mb * 1_048_576)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: STOP.set())
    supervisor, web, workdir = common.start_full_system(args.multiple)
    try:
        operator = wait_for_operator()
        people = probe_people(operator)
        sampler = MemorySampler(supervisor.children)
        sampler.start()
        probes = asyncio.run(
            run_probes(web, people, args.minutes, args.probe_every, sampler, workdir)
        )
        sampler.stopped.set()
        sampler.join()
        supervisor.stop_component("simulator")
        events_in, rows = drain_and_count()
    finally:
        supervisor.stop()
    restarts = {c.component.name: c.restarts for c in supervisor.children}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = common.RESULTS / f"longrun-{stamp}-logs"
    shutil.copytree(workdir / "logs", logs, dirs_exist_ok=True)
    series = sampler.samples
    result = {
        "machine": common.machine(),
        "params": vars(args),
        "note": args.note,
        "stopped_early": STOP.is_set(),
        "probes": probes,
        "probes_passed": sum(p["ok"] for p in probes),
        "probes_total": len(probes),
        "disk_mb": disk_by_folder(workdir),
        "rss_plateau": plateaus(sampler.samples, [c.component.name for c in supervisor.children]),
        "rss_mb_series": series,
        "events_in": events_in,
        "rows_in_pinot": rows,
        "equal": events_in == rows,
        "restarts": restarts,
        "logs": str(logs.relative_to(ROOT)),
    }
    path = common.RESULTS / f"longrun-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
    common.print_table(
        f"Long run: default load x{args.multiple:g}, retention "
        f"{args.retention_mb or 'default'} MiB a partition, {args.minutes:g} min; "
        f"{result['probes_passed']}/{len(probes)} probes passed, Kafka's log "
        f"{result['disk_mb'].get('kafka')} MiB on disk",
        [
            (f"{p['t_min']}", "pass" if p["ok"] else f"FAIL at {p['step']}",
             str(p.get("gps_http", "")), str(p.get("socket_s", "")), str(p.get("update_s", "")),
             str(p.get("rest_s", "")),
             str(p["kafka_rss_mb"]), str(p["disk_mb"].get("kafka")))
            for p in probes
        ],
        header=("t (min)", "probe", "GPS HTTP", "GPS->socket s", "GPS->update s", "GPS->REST s", "Kafka RSS MiB",
                "Kafka disk MiB"),
    )  # fmt: skip
    names = [c.component.name for c in supervisor.children]
    common.print_table(
        "Memory (RSS MiB, with children) every 30 s",
        [(f"{row['t_s']}s", *(str(row["rss_mb"][n]) for n in names)) for row in series],
        header=("t", *names),
    )
    common.print_table(
        "CPU (cores, with children) per 10-minute window",
        cpu_windows(series, names),
        header=("from (min)", "orders/min", "statuses/s", "GPS/s", *names, "total"),
    )
    folders = sorted({name for p in probes for name in p["disk_mb"]})
    common.print_table(
        "Disk under var/ (MiB allocated) at each probe",
        [(f"{p['t_min']}", *(str(p["disk_mb"].get(f, "")) for f in folders)) for p in probes],
        header=("t (min)", *folders),
    )
    if result["rss_plateau"]:
        common.print_table(
            "RSS plateau: the last 30 minutes against minute 90 (bar: within 5%)",
            [
                (n, str(v["at_mark_mb"]), f"{v['tail_min_mb']}-{v['tail_max_mb']}",
                 f"{v['max_departure_pct']}%")
                for n, v in result["rss_plateau"].items()
            ],
            header=("component", "RSS at 90 min", "last 30 min", "widest departure"),
        )  # fmt: skip
    common.print_table(
        "System of record vs Pinot after draining",
        [(k, str(events_in[k]), str(rows[k])) for k in events_in],
        header=("what", "system of record", "Pinot"),
    )
    print("  restarts:", restarts)
    print("  written to", path, "and", logs)


if __name__ == "__main__":
    main()

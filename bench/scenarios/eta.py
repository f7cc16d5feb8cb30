"""Accuracy of the arrival prediction over a simulated day, beside today's fixed-speed rule.

The seeded simulator runs the demo city on a virtual clock for ``--history-hours`` and
the evaluated ``--hours``; the orders' final states and GPS points go to the enriched
topics as the stream job would write them (the job itself is skipped), and Pinot ingests
them. For every order delivered in the day, at each step, the production predictor
(``tracker.tracking.eta``) predicts from statistics loaded as of the last refresh before
that moment (every ``--refresh`` virtual seconds). The baseline is the retired rule: 20
km/h on the straight line after pickup, plus the predictor's default kitchen times
before it.

``--workdir DIR`` keeps the simulated day (reused by the next run there) and every
prediction (``predictions.pickle``); ``--parts DIR`` takes that file's error apart.

    .venv/bin/python -m bench eta --seed 7 --hours 24 --workdir var/eta-day
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
import pickle
import random
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

from bench import harness
from bench.harness import percentile, print_table

ZONE = "Asia/Kolkata"  # the demo city's
STEPS = ("PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED",
         "OUT_FOR_DELIVERY", "HALFWAY", "ARRIVING_AT_DOOR")  # fmt: skip
SHOWN = {"PLACED_ORDER": "at placement", "ORDER_CONFIRMED": "confirmed",
         "BEING_PREPARED": "preparing", "BEING_COOKED": "cooking",
         "OUT_FOR_DELIVERY": "picked up", "HALFWAY": "halfway on the road",
         "ARRIVING_AT_DOOR": "at the door"}  # fmt: skip
BASELINE_BAND_S = 300


def simulate(args: argparse.Namespace) -> tuple[int, int, dict]:
    """Run the simulator; returns the evaluated day's (start, end) in epoch ms and stats."""
    from django.core.management import call_command
    from django.utils import timezone

    from contract.events import epoch_ms
    from tracker.orders.models import Order
    from tracker.simulator.engine import SimConfig, Simulation, VirtualClock

    call_command("migrate", verbosity=0)
    call_command("simulate", seed_only=True, seed=42)
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    day_start = today - timedelta(days=2)  # local midnight, the day and its end in the past
    day_end = day_start + timedelta(hours=args.hours)
    start = day_start - timedelta(hours=args.history_hours)
    config = SimConfig(orders_per_minute=args.rate, pace=args.pace, gps_interval=args.gps_interval)
    sim = Simulation(random.Random(args.seed), config, VirtualClock(start))
    t0 = time.perf_counter()
    stats = sim.run(duration=(day_end - start).total_seconds() + 3600)  # + an hour to finish
    print(f"simulated {stats} in {time.perf_counter() - t0:.0f} s", flush=True)
    # The GPS points, from the simulation's log rather than read back out of Kafka.
    numbered = list(Order.objects.order_by("id").values_list("id", flat=True))
    trails: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for offset, kind, _, *detail in sim.log:
        if kind == "gps":
            at = epoch_ms(start) + round(offset * 1000)
            for number, lat, lon in detail[0]:
                trails[numbered[number - 1]].append((at, lat, lon))
    return epoch_ms(day_start), epoch_ms(day_end), stats, trails


def publish_enriched(trails: dict) -> dict:
    """Write the orders' final states and the GPS points to the enriched topics, as the
    stream job would; returns (orders by id with their status times, GPS trails by order)."""
    from contract import geo
    from contract.events import (
        DeliveryStatus,
        OrderEnriched,
        epoch_ms,
        new_event_id,
        status_time_field,
    )
    from runtime import kafka
    from tracker.orders.models import Order

    orders = {}
    sent = kafka.Deliveries(kafka.producer(**{"linger.ms": 20}))
    query = Order.objects.select_related("restaurant", "customer__user").prefetch_related(
        "status_changes"
    )
    for count, order in enumerate(query.order_by("id").iterator(chunk_size=500)):
        changes = sorted(order.status_changes.all(), key=lambda c: (c.changed_at, c.id))
        times = {}
        for change in changes:
            times.setdefault(change.status, epoch_ms(change.changed_at))
        last = changes[-1]
        facts = dict(
            restaurant=(order.restaurant.lat, order.restaurant.lon),
            destination=(order.delivery_lat, order.delivery_lon),
            restaurant_id=order.restaurant_id,
            times=times,
        )
        orders[order.pk] = facts
        sent.publish(
            OrderEnriched(
                event_id=new_event_id(), event_time=epoch_ms(last.changed_at),
                order_id=order.pk, version=len(changes), customer_id=order.customer_id,
                customer_name=order.customer.display_name, restaurant_id=order.restaurant_id,
                restaurant_name=order.restaurant.name, restaurant_lat=order.restaurant.lat,
                restaurant_lon=order.restaurant.lon, delivery_lat=order.delivery_lat,
                delivery_lon=order.delivery_lon, items=[], item_count=0,
                total=float(order.total), status=last.status,
                status_time=times[last.status], created_at=epoch_ms(order.created_at),
                courier_id=order.courier_id,
                **{status_time_field(s): t for s, t in times.items()},
            ),
        )  # fmt: skip
        arriving = times.get("ARRIVING_AT_DOOR")
        for version, (at, lat, lon) in enumerate(trails.get(order.pk, []), start=1):
            left = geo.haversine_km(lat, lon, *facts["destination"])
            sent.publish(
                DeliveryStatus(
                    event_id=new_event_id(), event_time=at, order_id=order.pk,
                    version=version, customer_id=order.customer_id,
                    restaurant_id=order.restaurant_id, courier_id=order.courier_id,
                    status="ARRIVING_AT_DOOR" if arriving and at >= arriving
                    else "OUT_FOR_DELIVERY",
                    lat=lat, lon=lon, destination_lat=order.delivery_lat,
                    destination_lon=order.delivery_lon, distance_left_km=left,
                ),
            )  # fmt: skip
        if count % 200 == 0:
            sent.producer.poll(0)
    sent.flush(120)
    return orders


def fixed_speed_seconds(km: float) -> int:
    """The baseline ride: the stream job's ETA before the learned prediction replaced it,
    straight-line km left at the simulator's average courier speed, rounded up."""
    from contract import geo

    return math.ceil(max(km, 0.0) / geo.COURIER_SPEED_KMH * 3600)


def evaluate(orders: dict, trails: dict, day: tuple[int, int], refresh_ms: int) -> dict:
    from contract import geo
    from tracker.tracking import eta
    from tracker.tracking.eta.stats import DEFAULT_TO_PICKUP, MID

    loaded: dict[int, eta.Statistics] = {}

    def stats_at(t: int) -> eta.Statistics:
        as_of = t - t % refresh_ms
        if as_of not in loaded:
            loaded[as_of] = eta.load_statistics(as_of)
        return loaded[as_of]

    def position_at(oid: int, t: int, facts: dict) -> tuple[float, float]:
        """The courier's last GPS point at ``t`` (the restaurant before)."""
        trail = trails.get(oid, [])
        i = bisect.bisect_right([at for at, _, _ in trail], t) - 1
        return trail[i][1:] if i >= 0 else facts["restaurant"]

    errors = {name: defaultdict(list) for name in ("new", "baseline")}
    inside, widths, bases = (
        defaultdict(list),
        defaultdict(list),
        defaultdict(lambda: defaultdict(int)),
    )
    evaluated, rows = 0, []
    t0 = time.perf_counter()
    for oid, facts in sorted(orders.items()):
        times = facts["times"]
        if "DELIVERED" not in times or not day[0] <= times["PLACED_ORDER"] < day[1]:
            continue
        evaluated += 1
        actual = times["DELIVERED"]
        moments = {s: times[s] for s in STEPS if s in times}
        moments["HALFWAY"] = (times["OUT_FOR_DELIVERY"] + times["ARRIVING_AT_DOOR"]) // 2
        for step, t in moments.items():
            status = "OUT_FOR_DELIVERY" if step == "HALFWAY" else step
            courier = position_at(oid, t, facts)
            km = geo.haversine_km(*courier, *facts["destination"])
            riding = status == "OUT_FOR_DELIVERY"
            trip = eta.Trip(facts["restaurant_id"], status, times[status], facts["restaurant"],
                            facts["destination"], km if riding else None,
                            courier if riding else None)  # fmt: skip
            p = eta.predict(trip, stats_at(t), t)
            errors["new"][step].append((p.arrives_at - actual) / 1000)
            inside[step].append(p.earliest <= actual <= p.latest)
            widths[step].append((p.latest - p.earliest) / 1000)
            bases[step][f"kitchen={p.basis.get('kitchen')}, speed={p.basis.get('speed')}"] += 1
            kitchen = DEFAULT_TO_PICKUP[status].values[MID] if status in DEFAULT_TO_PICKUP else 0
            baseline = t + (kitchen + fixed_speed_seconds(km)) * 1000
            errors["baseline"][step].append((baseline - actual) / 1000)
            rows.append({"order_id": oid, "step": step, "at": t, "km_left": km, **facts,
                         "arrives_at": p.arrives_at, "earliest": p.earliest,
                         "latest": p.latest, "baseline": baseline, "basis": p.basis})  # fmt: skip
    print(f"evaluated {evaluated} orders in {time.perf_counter() - t0:.0f} s "
          f"({len(loaded)} statistics loads)", flush=True)  # fmt: skip

    def summary(signed: list[float]) -> dict:
        absolute = [abs(e) for e in signed]
        return {
            "mae_s": round(sum(absolute) / len(absolute), 1),
            "p90_abs_s": round(percentile(absolute, 90), 1),
            "bias_s": round(sum(signed) / len(signed), 1),
            "within_5min": round(sum(a <= BASELINE_BAND_S for a in absolute) / len(absolute), 3),
        }

    steps = {}
    for step in STEPS:
        if not errors["new"][step]:
            continue
        new, base = summary(errors["new"][step]), summary(errors["baseline"][step])
        steps[step] = {
            "predictions": len(errors["new"][step]),
            "new": {
                **new,
                "inside_range": round(sum(inside[step]) / len(inside[step]), 3),
                "mean_range_s": round(sum(widths[step]) / len(widths[step]), 1),
                "basis": dict(bases[step]),
            },
            "baseline": base,
            "mae_reduction": round(1 - new["mae_s"] / base["mae_s"], 3) if base["mae_s"] else None,
        }
    return {"orders": evaluated, "statistics_loads": len(loaded), "steps": steps, "rows": rows}


OPTIONS = {
    "--seed": 7,
    "--hours": (24.0, "evaluated hours from midnight"),
    "--history-hours": (24.0, "simulated before them"),
    "--rate": (3.0, "orders per minute"),
    "--pace": (0.25, "kitchen waits / this"),
    "--gps-interval": (30.0, "seconds between points"),
    "--refresh": (300.0, "statistics refresh, s"),
    "--workdir": (str, "keep the simulated day and every prediction here; reuse the day"),
    "--parts": (Path, "only analyse the predictions a --workdir run kept: each part's error"),
}


def run(args: argparse.Namespace) -> dict | None:
    if args.parts:
        return parts(args.parts)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-eta-"))
    workdir.mkdir(parents=True, exist_ok=True)
    saved = workdir / "simulated.pickle"
    # Kafka's and Pinot's data in a folder of their own, not the kept workdir: a reused
    # simulation is published again, into empty topics and tables. The simulated days lie
    # up to three days back: kept past Pinot's default retention.
    env = {
        "KAFKA_TOPIC_PREFIX": "bench.", "DJANGO_TIME_ZONE": ZONE, "PINOT_RETENTION_DAYS": "30",
        "DATABASE_URL": f"sqlite:///{workdir / 'ordertrack.sqlite3'}",
    }  # fmt: skip
    with harness.system(["kafka"], env=env) as kafka:
        if saved.exists():  # the same simulated day again, for another predictor
            day_start, day_end, sim_stats, trails = pickle.loads(saved.read_bytes())
            print(f"reusing the simulation in {saved}", flush=True)
        else:
            day_start, day_end, sim_stats, trails = simulate(args)
            if args.workdir:
                saved.write_bytes(pickle.dumps((day_start, day_end, sim_stats, trails)))
        t0 = time.perf_counter()
        orders = publish_enriched(trails)
        with harness.system(["pinot"], env=kafka.env):
            harness.wait_pinot_caught_up(timeout=1800)
            print(f"loaded {len(orders)} orders and {sum(map(len, trails.values()))} GPS points "
                  f"into Pinot in {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
            result = evaluate(orders, trails, (day_start, day_end), int(args.refresh * 1000))
    if args.workdir:
        (workdir / "predictions.pickle").write_bytes(pickle.dumps(result.pop("rows")))
    else:
        result.pop("rows")

    rows = []
    for step, r in result["steps"].items():
        new, base = r["new"], r["baseline"]
        rows.append((
            SHOWN[step], str(r["predictions"]),
            f"{new['mae_s'] / 60:.1f}", f"{base['mae_s'] / 60:.1f}",
            f"{r['mae_reduction']:.0%}", f"{new['inside_range']:.0%}",
            f"{new['mean_range_s'] / 60:.1f}", f"{new['within_5min']:.0%}", f"{base['within_5min']:.0%}",
            f"{new['bias_s'] / 60:+.1f} / {base['bias_s'] / 60:+.1f}",
        ))  # fmt: skip
    print_table(
        f"ETA accuracy, {result['orders']} deliveries of a simulated day (seed {args.seed})",
        rows,
        ("step", "n", "MAE min", "baseline MAE", "lower by", "inside range", "range min",
         "within 5 min", "baseline 5 min", "bias new / base"),
    )  # fmt: skip
    return {
        "simulated": sim_stats,
        "day": [
            datetime.fromtimestamp(day_start / 1000).isoformat(),
            datetime.fromtimestamp(day_end / 1000).isoformat(),
        ],  # fmt: skip
        "zone": ZONE,
        **result,
    }


# ------------------------------------------------------------------ the error's parts

KITCHEN = ("PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED")
ZONE_OFFSET_MS = 19_800_000  # Asia/Kolkata, the bench's zone (no daylight saving)


def line(name: str, errors: list[float]) -> str:
    mae = sum(abs(e) for e in errors) / len(errors) / 60
    bias = sum(errors) / len(errors) / 60
    return (
        f"  {name:9s} MAE {mae:5.2f} min  bias {bias:+.2f}  sd {statistics.pstdev(errors) / 60:.2f}"
    )


def actual_parts(times: dict, step: str, at: int) -> dict[str, float]:
    """Seconds each part still took after ``at``."""
    parts = {"door": (times["DELIVERED"] - max(at, times["ARRIVING_AT_DOOR"])) / 1000}
    if step != "ARRIVING_AT_DOOR":
        leaving = max(at, times["OUT_FOR_DELIVERY"])
        parts["ride"] = (times["ARRIVING_AT_DOOR"] - leaving) / 1000
    if step in KITCHEN:
        parts["kitchen"] = (times["OUT_FOR_DELIVERY"] - at) / 1000
    return parts


def reference_at_placement(row: dict) -> float:
    """Seconds from placement to delivered expected by someone who knows the simulator."""
    from contract import geo
    from tracker.simulator import engine

    def hour(ms: int) -> int:
        return int((ms + ZONE_OFFSET_MS) % 86_400_000 // 3_600_000)

    times = row["times"]
    pace = 0.25  # the bench's default --pace
    steps = sum((low + high) / 2 for (low, high) in list(engine.KITCHEN_WAITS.values())[:4])
    load = engine.KITCHEN_LOAD_BY_HOUR[hour(row["at"])]
    kitchen = steps / pace * engine.kitchen_pace(row["restaurant_id"]) * load
    bearing = math.radians(geo.bearing_deg(*row["restaurant"], *row["destination"]))
    streets = geo.haversine_km(*row["restaurant"], *row["destination"]) * (
        abs(math.sin(bearing)) + abs(math.cos(bearing))
    )
    speed = geo.COURIER_SPEED_KMH * engine.TRAFFIC_BY_HOUR[hour(times["OUT_FOR_DELIVERY"])]
    ride = max(streets - 0.15, 0) / speed * 3600 + 15  # arriving within 150 m, GPS every 30 s
    low, high = engine.KITCHEN_WAITS[engine.OrderStatus.ARRIVING_AT_DOOR]
    return kitchen + ride + (low + high) / 2 / pace


def parts(workdir: Path) -> None:
    """Where the prediction's error comes from: each part (kitchen, ride, door) of every
    prediction a ``--workdir`` run kept, against what happened; at placement also a
    reference that knows the simulator's own settings (the floor of this simulation)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("ORDERTRACK_VAR_DIR", str(workdir))
    django.setup()
    rows = pickle.loads((workdir / "predictions.pickle").read_bytes())
    by_step: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_step[row["step"]].append(row)
    for step, step_rows in by_step.items():
        errors: dict[str, list[float]] = defaultdict(list)
        for row in step_rows:
            times = row["times"]
            errors["total"].append((row["arrives_at"] - times["DELIVERED"]) / 1000)
            errors["baseline"].append((row["baseline"] - times["DELIVERED"]) / 1000)
            actual = actual_parts(times, step, row["at"])
            for part, predicted in row["basis"]["seconds_ahead"].items():
                errors[part].append(predicted - actual[part])
            if step == "PLACED_ORDER":
                took = (times["DELIVERED"] - row["at"]) / 1000
                errors["reference"].append(reference_at_placement(row) - took)
        print(f"{step} ({len(step_rows)} predictions)")
        for name in ("total", "kitchen", "ride", "door", "baseline", "reference"):
            if errors[name]:
                print(line(name, errors[name]))

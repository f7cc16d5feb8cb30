"""Apache Pinot against issue 52's targets: freshness at 10x, the arrival predictor's
statistics refresh, start-up and memory; and the selectors.

Pinot runs as ``make run`` runs it, on a Kafka node of its own. ``--parts`` (each on
engines of its own):

* ``queries``: ``--orders`` orders' enriched records produced, Pinot started and timed
  until it holds them; each selector of ``tracker.tracking.selectors``, p50/p99/max;
* ``eta``: ``--history-minutes`` of the default load's records; then
  ``tracker.tracking.eta.load_statistics()`` ``--refreshes`` times (wall, own and Pinot CPU);
* ``fresh``: ``--multiple`` x the default load, open loop for ``--seconds``, with a marker
  record every ``--probe-every`` s polled until visible: produced -> visible p50/p99/max.

The load is shaped as the stream job writes the simulator's events (about 1,090 records
an order). Pinot's CPU per order-detail read: ``python -m bench api --rate 50 --multiple 1``.

    .venv/bin/python -m bench pinot --parts queries,eta,fresh
"""

from __future__ import annotations

import argparse
import heapq
import random
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from bench import harness
from contract import geo
from contract import load as real
from contract.events import Event, now_ms
from localrun.launch import System
from runtime import kafka
from tests.fixtures_pinot import delivery_event, item_event, order_event

STATUSES = ["PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED",
            "OUT_FOR_DELIVERY", "ARRIVING_AT_DOOR", "DELIVERED"]  # fmt: skip
CUSTOMERS, RESTAURANTS, COURIERS = 5000, 50, 60
DISHES = ["Margherita", "Marinara", "Diavola", "Calzone", "Tiramisu", "Cola", "Salad", "Fries"]
#: The fixtures' restaurant and door (tests.fixtures_pinot), a courier's ride between them.
SHOP, DOOR = (52.52, 13.40), (52.53, 13.42)
#: Marker orders' ids: far above any load's.
MARKER_BASE = 10**12


# ----------------------------------------------------------------------- the old part


def produce(orders: int, rng: random.Random) -> int:
    """The ``queries`` part's data set (the old benchmark's); returns the record count."""
    sent = kafka.Deliveries(kafka.producer(**{"linger.ms": 20, "batch.num.messages": 10_000}))
    now = now_ms()
    count = 0
    for oid in range(1, orders + 1):
        created = now - rng.randrange(0, 8 * 86_400_000)
        cust, rest = rng.randrange(1, CUSTOMERS), rng.randrange(1, RESTAURANTS)
        final = rng.randrange(0, len(STATUSES))
        steps = sorted({0, max(0, final - 1), final})
        at = created
        for version, step in enumerate(steps, start=1):
            at = created + step * 60_000
            times = {STATUSES[i]: created + i * 60_000 for i in range(step + 1)}
            sent.publish(
                order_event(oid, version, STATUSES[step], customer_id=cust, restaurant_id=rest,
                            created_at=created, status_time=at, status_times=times,
                            total=round(rng.uniform(8, 80), 2)),
            )  # fmt: skip
            count += 1
        for line in (1, 2):
            sent.publish(
                item_event(oid, line, rng.choice(DISHES), rng.randrange(1, 4), 7.5,
                           restaurant_id=rest, at=created),
            )  # fmt: skip
            count += 1
        if oid % 5 == 0:
            for v in range(1, 6):
                sent.publish(
                    delivery_event(oid, v, 52.5 + rng.random() / 10, 13.4 + rng.random() / 10,
                                   at=at + v * 1000, restaurant_id=rest),
                )  # fmt: skip
                count += 1
        if oid % 10_000 == 0:
            sent.producer.poll(0)
    sent.flush(60)
    return count


def timed(fn: Callable[[], object], iterations: int) -> dict[str, float]:
    fn()  # warm-up (connection, caches)
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 2),
        "max_ms": round(samples[-1], 2),
    }


def part_queries(args: argparse.Namespace) -> dict:
    """Produce, start Pinot on it, time the ingest and each selector."""
    from tracker.tracking import selectors as s

    rng = random.Random(42)
    with Engines("bench.") as started:
        t0 = time.perf_counter()
        records = produce(args.orders, rng)
        produce_s = time.perf_counter() - t0
        print(f"produced {records} records in {produce_s:.1f} s", flush=True)
        t0 = time.perf_counter()
        pinot = started()
        after_ready_s = harness.wait_pinot_caught_up(timeout=3600)
        ingest_s = time.perf_counter() - t0  # start-up included, as the old benchmark's
        print(f"Pinot ready in {pinot.ready_s:.1f} s, holding every record after {ingest_s:.1f} s "
              f"({records / ingest_s:,.0f} records/s)", flush=True)  # fmt: skip
        box = [(13.42, 52.52), (13.46, 52.52), (13.46, 52.56), (13.42, 52.56)]
        queries = {
            "customer_orders": lambda: s.list_orders(
                customer_id=rng.randrange(1, CUSTOMERS), limit=20
            ),
            "customer_orders_active": lambda: s.list_orders(
                customer_id=rng.randrange(1, CUSTOMERS), state="active"
            ),
            "order_state": lambda: s.order_state(rng.randrange(1, args.orders)),
            "order_status_history": lambda: s.order_status_history(rng.randrange(1, args.orders)),
            "courier_path": lambda: s.courier_path(5 * rng.randrange(1, max(2, args.orders // 5))),
            "time_in_status_percentiles": lambda: s.time_in_status_percentiles(),
            "stuck_orders": lambda: s.stuck_orders(10 * 60_000, status="BEING_COOKED"),
            "deliveries_in_area": lambda: s.deliveries_in_area(box),
            "restaurant_dashboard_all": lambda: s.restaurant_dashboard(),
            "restaurant_dashboard_one": lambda: s.restaurant_dashboard(
                rng.randrange(1, RESTAURANTS)
            ),
        }
        results = {name: timed(fn, args.iterations) for name, fn in queries.items()}
        rows = {table: harness.pinot_rows(table) for table in harness.ENRICHED_TABLES}
        rss = pinot.rss_mb()
    return {
        "orders": args.orders,
        "records": records,
        "produce_seconds": round(produce_s, 2),
        "ingest_seconds": round(ingest_s, 2),
        "ingest_records_per_second": round(records / ingest_s),
        "caught_up_after_ready_s": round(after_ready_s, 2),
        "pinot_ready_s": pinot.ready_s,
        "pinot_rss_mb_after": round(rss),
        "rows": rows,
        "iterations": args.iterations,
        "queries": results,
    }


# ----------------------------------------------------------------------- the load


@dataclass
class Load:
    """The default load's enriched records per order (see the module's docstring): change
    ``k`` of an order placed at ``P`` is due at ``P + offsets[k]`` and has version ``k + 1``."""

    multiple: float
    kitchen_step: float
    ride_seconds: float
    gps_interval: float
    lines: int
    offsets: list[float] = field(init=False)
    kinds: list[str] = field(init=False)

    def __post_init__(self) -> None:
        points = max(1, round(self.ride_seconds / self.gps_interval))
        pickup = 4 * self.kitchen_step
        self.offsets = [0.0, *(self.kitchen_step * i for i in (1, 2, 3)), pickup]
        self.kinds = [*STATUSES[:5]]
        for i in range(1, points + 1):
            self.offsets.append(pickup + i * self.gps_interval)
            self.kinds.append("gps")
        arriving = pickup + (points + 1) * self.gps_interval
        self.offsets += [arriving, arriving + 60]
        self.kinds += ["ARRIVING_AT_DOOR", "DELIVERED"]
        self.points = points

    @property
    def per_s(self) -> float:
        """Orders placed a second."""
        return real.Load(self.multiple).orders_per_second

    @property
    def lifetime_s(self) -> float:
        return self.offsets[-1]

    def records(self, oid: int, k: int, placed_ms: int) -> list[Event]:
        """Change ``k``'s records (event times from the schedule, so a replay is the same)."""
        kind, at = self.kinds[k], placed_ms + round(self.offsets[k] * 1000)
        rest, cust = oid % RESTAURANTS + 1, oid % CUSTOMERS + 1
        courier_id = oid % COURIERS + 1
        times = {
            STATUSES[i]: placed_ms + round(self.offsets[i] * 1000) for i in range(min(k, 4) + 1)
        }
        status = "OUT_FOR_DELIVERY" if kind == "gps" else kind
        if kind in ("ARRIVING_AT_DOOR", "DELIVERED"):
            times["ARRIVING_AT_DOOR"] = placed_ms + round(self.offsets[-2] * 1000)
        if kind == "DELIVERED":
            times["DELIVERED"] = at
        common_fields = dict(customer_id=cust, restaurant_id=rest, created_at=placed_ms)
        if k == 0:
            return [
                order_event(oid, 1, "PLACED_ORDER", **common_fields, status_time=at, total=22.0),
                *(item_event(oid, line, DISHES[(oid + line) % len(DISHES)], 1, 11.0,
                             restaurant_id=rest, at=at) for line in range(1, self.lines + 1)),
            ]  # fmt: skip
        if k < 4:  # a kitchen status
            return [order_event(oid, k + 1, status, **common_fields, status_time=at,
                                status_times=times)]  # fmt: skip
        share = min(1.0, max(0.0, (k - 4) / (self.points + 1)))
        lat, lon = geo.interpolate(*SHOP, *DOOR, share)
        status_time = times.get(status, at)
        out: list[Event] = [
            order_event(oid, k + 1, status, **common_fields, status_time=status_time,
                        status_times=times, courier=(courier_id, lat, lon, at)),
        ]  # fmt: skip
        if kind != "DELIVERED":
            out.append(
                delivery_event(oid, k + 1, lat, lon, at=at, courier_id=courier_id,
                               restaurant_id=rest,
                               status="ARRIVING_AT_DOOR" if kind == "ARRIVING_AT_DOOR"
                               else "OUT_FOR_DELIVERY"),
            )  # fmt: skip
        return out


class Errors:
    """Counts delivery errors of the producers' records."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def __call__(self, err: object, _msg: object) -> None:
        if err is not None:
            self.count += 1
            self.first = self.first or str(err)


def write_history(load: Load, minutes: float, first_oid: int) -> dict:
    """``minutes`` of ``load`` up to now, as fast as the producer goes (each change that
    was due by now). Returns counts and the next free order id."""
    producer = kafka.producer(**{"linger.ms": 50, "batch.num.messages": 10_000})
    errors = Errors()
    end = now_ms()
    start = end - round(minutes * 60_000)
    orders = int(minutes * 60 * load.per_s)
    sent = 0
    t0 = time.perf_counter()
    for n in range(orders):
        oid = first_oid + n
        placed = start + round(n / load.per_s * 1000)
        for k, offset in enumerate(load.offsets):
            if placed + offset * 1000 > end:
                break
            for event in load.records(oid, k, placed):
                kafka.publish(producer, event, errors)
                sent += 1
        producer.poll(0)
    producer.flush(120)
    took = time.perf_counter() - t0
    if errors.count:
        raise SystemExit(f"{errors.count} history records not delivered: {errors.first}")
    return {"orders": orders, "records": sent, "produce_s": round(took, 1),
            "next_order_id": first_oid + orders}  # fmt: skip


# ----------------------------------------------------------------------- freshness


class Markers:
    """Marker records published on a timer and polled until Pinot answers with them."""

    TABLES = ("orders_enriched", "delivery_statuses", "order_items_enriched")

    def __init__(self, poll_s: float, timeout_s: float = 60.0) -> None:
        self.producer = kafka.producer()
        self.errors = Errors()
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self.pending: dict[int, tuple[str, float]] = {}  # marker id -> (table, produced at)
        self.seen: list[tuple[str, float]] = []  # (table, seconds produced -> visible)
        self.lost: list[int] = []
        self.count = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)

    def publish(self) -> None:
        """One marker: a new order's record on the next table in turn."""
        oid = MARKER_BASE + self.count
        table = self.TABLES[self.count % len(self.TABLES)]
        self.count += 1
        event = {
            "orders_enriched": lambda: order_event(oid, 1, "PLACED_ORDER"),
            "delivery_statuses": lambda: delivery_event(oid, 1, *DOOR),
            "order_items_enriched": lambda: item_event(oid, 1, "Marker", 1, 1.0),
        }[table]()
        with self.lock:
            self.pending[oid] = (table, time.monotonic())
        kafka.publish(self.producer, event, self.errors)
        self.producer.poll(0)

    def _poll(self) -> None:
        from tracker.tracking.exceptions import TrackingUnavailable
        from tracker.tracking.selectors.store import query

        while not (self.stop.is_set() and not self.pending):
            with self.lock:
                by_table: dict[str, list[int]] = {}
                for oid, (table, _) in self.pending.items():
                    by_table.setdefault(table, []).append(oid)
            for table, ids in by_table.items():
                sql = (f"SELECT order_id FROM {table} WHERE order_id IN "
                       f"({', '.join(map(str, ids))}) LIMIT {len(ids)}")  # fmt: skip
                try:
                    rows = query(sql)
                except TrackingUnavailable:
                    continue
                answered = time.monotonic()  # the record was visible by then: an upper bound
                with self.lock:
                    for row in rows:
                        entry = self.pending.pop(int(row["order_id"]), None)
                        if entry is not None:
                            self.seen.append((entry[0], answered - entry[1]))
            now = time.monotonic()
            with self.lock:
                for oid, (_, at) in list(self.pending.items()):
                    if now - at > self.timeout_s:
                        self.lost.append(oid)
                        del self.pending[oid]
            time.sleep(self.poll_s)

    def summary(self) -> dict:
        def figures(values: list[float]) -> dict:
            ms = [v * 1000 for v in values]
            return {"n": len(ms), "p50_ms": round(harness.percentile(ms, 50), 1),
                    "p99_ms": round(harness.percentile(ms, 99), 1),
                    "max_ms": round(max(ms, default=0.0), 1)}  # fmt: skip

        return {
            **figures([s for _, s in self.seen]),
            "published": self.count,
            "not_seen_within_s": {"timeout_s": self.timeout_s, "count": len(self.lost)},
            "delivery_errors": self.errors.count,
            "by_table": {t: figures([s for n, s in self.seen if n == t]) for t in self.TABLES},
        }


def open_loop(load: Load, seconds: float, first_oid: int, markers: Markers, every: float) -> dict:
    """``load`` for ``seconds`` from now, each change sent when due (open loop: a
    generator that falls behind shows as lag), already in its steady state; a marker
    every ``every`` seconds."""
    producer = kafka.producer()
    errors = Errors()
    t_start, wall0 = time.monotonic(), now_ms()

    def wall(t: float) -> int:
        return wall0 + round((t - t_start) * 1000)

    heap: list[tuple[float, int, int, float]] = []  # (due, order, change, placed)
    oid = first_oid
    for j in range(int(load.lifetime_s * load.per_s), 0, -1):  # under way already
        placed = t_start - j / load.per_s
        k = next((i for i, o in enumerate(load.offsets) if placed + o >= t_start), None)
        if k is not None:
            heap.append((placed + load.offsets[k], oid, k, placed))
        oid += 1
    heapq.heapify(heap)
    next_order, next_marker, sent, lags = t_start, t_start + every / 2, 0, []
    markers.poller.start()
    while True:
        now = time.monotonic()
        if now - t_start >= seconds:
            break
        while next_order <= now:
            heapq.heappush(heap, (next_order, oid, 0, next_order))
            oid, next_order = oid + 1, next_order + 1 / load.per_s
        while heap and heap[0][0] <= now:
            due, order, k, placed = heapq.heappop(heap)
            for event in load.records(order, k, wall(placed)):
                kafka.publish(producer, event, errors)
                sent += 1
            lags.append(time.monotonic() - due)
            if k + 1 < len(load.offsets):
                heapq.heappush(heap, (placed + load.offsets[k + 1], order, k + 1, placed))
        if now >= next_marker:
            markers.publish()
            next_marker += every
        producer.poll(0)
        wake = min(heap[0][0] if heap else now + 0.005, next_order, next_marker)
        time.sleep(max(0.0, min(0.005, wake - time.monotonic())))
    elapsed = time.monotonic() - t_start
    producer.flush(60)
    markers.producer.flush(10)
    return {
        "seconds": round(elapsed, 1),
        "records": sent,
        "records_per_s": round(sent / elapsed),
        "generator_lag_ms_p99": round(harness.percentile(lags, 99) * 1000, 1),
        "generator_lag_ms_max": round(max(lags, default=0.0) * 1000, 1),
        "delivery_errors": errors.count,
        "next_order_id": oid,
    }


def part_eta_fresh(args: argparse.Namespace, parts: set[str]) -> dict:
    """The statistics refresh on ``--history-minutes`` of history, then freshness at
    ``--multiple`` on the same Pinot."""
    from tracker.tracking import eta

    out: dict = {}
    shape = (args.kitchen_step, args.ride_seconds, args.gps_interval, args.lines)
    next_oid = 1
    with Engines("load.") as started:
        pinot = started()
        out["pinot_ready_s"] = pinot.ready_s
        if "eta" in parts:
            history = write_history(Load(1, *shape), args.history_minutes, next_oid)
            next_oid = history["next_order_id"]
            print(f"history: {history['records']:,} records of {history['orders']:,} orders "
                  f"written in {history['produce_s']} s", flush=True)  # fmt: skip
            history["caught_up_after_s"] = round(harness.wait_pinot_caught_up(timeout=7200), 1)
            print(f"Pinot holds them {history['caught_up_after_s']} s later", flush=True)
            history["rows"] = {t: harness.pinot_rows(t) for t in harness.ENRICHED_TABLES}
            eta.load_statistics()  # the connection and the JIT: not measured
            walls, own, jvm = [], [], []
            for _ in range(args.refreshes):
                w0, c0, p0 = time.perf_counter(), time.process_time(), pinot.cpu_s()
                eta.load_statistics()
                walls.append((time.perf_counter() - w0) * 1000)
                own.append((time.process_time() - c0) * 1000)
                jvm.append((pinot.cpu_s() - p0) * 1000)
            out["eta"] = {
                "history": history,
                "refreshes": args.refreshes,
                "wall_ms_p50": round(statistics.median(walls), 1),
                "wall_ms_max": round(max(walls), 1),
                "client_cpu_ms_p50": round(statistics.median(own), 1),
                "pinot_cpu_ms_p50": round(statistics.median(jvm), 1),
                "pinot_cpu_ms_mean": round(statistics.mean(jvm), 1),
            }
            out["pinot_rss_mb_after_history"] = round(pinot.rss_mb())
        if "fresh" in parts:
            load = Load(args.multiple, *shape)
            markers = Markers(args.poll_ms / 1000)
            cpu0, t0 = pinot.cpu_s(), time.monotonic()
            run = open_loop(load, args.seconds, next_oid, markers, args.probe_every)
            cores = (pinot.cpu_s() - cpu0) / (time.monotonic() - t0)
            markers.stop.set()
            markers.poller.join(markers.timeout_s + 10)
            out["fresh"] = {
                "multiple": args.multiple,
                "load": run,
                "visible": markers.summary(),
                "pinot_cores_during_load": round(cores, 2),
                "pinot_rss_mb_after": round(pinot.rss_mb()),
            }
    return out


# ----------------------------------------------------------------------- engines


class Engines:
    """A Kafka node of its own (``prefix``'d topics) and, when called, Pinot on it, both
    through the launcher: the records are produced before Pinot starts."""

    def __init__(self, prefix: str) -> None:
        # A throwaway node: no size cap (two hours of the load pass the local 256 MiB a
        # partition, and Pinot must read every record the benchmark counts).
        self.env = {"KAFKA_TOPIC_PREFIX": prefix, "KAFKA_RETENTION_BYTES": "-1"}
        self.systems: list[System] = []

    def __enter__(self) -> Callable[[], harness.Pinot]:
        self.systems.append(harness.start(["kafka"], env=self.env))
        return self._start

    def _start(self) -> harness.Pinot:
        self.systems.append(harness.start(["pinot"], env=self.systems[0].env))
        return harness.Pinot(self.systems[-1])

    def __exit__(self, *exc: object) -> None:
        for system in reversed(self.systems):
            system.stop()
            shutil.rmtree(system.workdir or "", ignore_errors=True)


def report(result: dict) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows for the table."""
    rows = []
    if q := result.get("queries_part"):
        rows.append((
            "queries: ingest", f"{q['ingest_records_per_second']:,} records/s from the start "
            f"(all held {q['caught_up_after_ready_s']} s after ready)", "",
        ))  # fmt: skip
        for name, r in q["queries"].items():
            rows.append((f"  {name}", f"p50 {r['p50_ms']} / p99 {r['p99_ms']} ms", ""))
    if e := result.get("eta"):
        h = e["history"]
        rows.append(
            ("eta: history", f"{h['records']:,} records, Pinot +{h['caught_up_after_s']} s", "")
        )
        rows.append(
            ("eta: load_statistics wall", f"p50 {e['wall_ms_p50']} / max {e['wall_ms_max']} ms", "")
        )
        rows.append(("eta: CPU per refresh", f"client {e['client_cpu_ms_p50']} ms, "
                     f"Pinot {e['pinot_cpu_ms_p50']} ms", ""))  # fmt: skip
    if f := result.get("fresh"):
        v, load = f["visible"], f["load"]
        rows.append((f"fresh: load at {f['multiple']:g}x", f"{load['records_per_s']:,} records/s, "
                     f"generator lag p99 {load['generator_lag_ms_p99']} ms", ""))  # fmt: skip
        rows.append(("fresh: produced -> visible", f"p50 {v['p50_ms']} / p99 {v['p99_ms']} / "
                     f"max {v['max_ms']} ms (n {v['n']}, lost "
                     f"{v['not_seen_within_s']['count']})", "p99 (issue 52)"))  # fmt: skip
        rows.append(("fresh: Pinot cores", str(f["pinot_cores_during_load"]), ""))
    for key in ("queries_part", "eta_fresh"):
        if (r := result.get(key)) and "pinot_ready_s" in r:
            rows.append(
                (f"{key}: start-up to ready (fresh data)", f"{r['pinot_ready_s']} s", "<= 60 s")
            )
    return rows


OPTIONS = {
    "--parts": "queries,eta,fresh",
    "--orders": (100_000, "queries: orders"),
    "--iterations": (100, "queries: runs a selector"),
    "--history-minutes": (120.0, "eta: default load"),
    "--refreshes": (20, "eta: statistics loads timed"),
    "--multiple": harness.multiple(10),
    "--seconds": (60.0, "fresh: load"),
    "--probe-every": (0.5, "fresh: s between markers"),
    "--poll-ms": (50.0, "fresh: marker polling (each poll is a Pinot query)"),
    "--kitchen-step": (60.0, "load: s between statuses"),
    "--ride-seconds": (540.0, "load: a ride"),
    "--gps-interval": (1.0, "load: s between points"),
    "--lines": (2, "load: item lines an order"),
}


def run(args: argparse.Namespace) -> dict:
    parts = set(args.parts.split(","))
    if unknown := parts - {"queries", "eta", "fresh"}:
        raise SystemExit(f"unknown parts: {', '.join(sorted(unknown))}")
    result: dict = {}
    if "queries" in parts:
        q = part_queries(args)
        result["queries_part"] = q
        result.update({k: v for k, v in q.items() if not isinstance(v, dict)})
    if parts & {"eta", "fresh"}:
        ef = part_eta_fresh(args, parts)
        result["eta_fresh"] = {"pinot_ready_s": ef.pop("pinot_ready_s")}
        result.update(ef)
    for key, value in _headline(result):
        result[key] = value
    harness.print_table("Apache Pinot (issue 52)", report(result), ("figure", "value", "target"))
    return result


def _headline(result: dict) -> Iterator[tuple[str, object]]:
    """The headline figures, at the result's top level (to compare two commits' runs)."""
    if f := result.get("fresh"):
        yield "fresh_visible_p99_ms", f["visible"]["p99_ms"]
    if e := result.get("eta"):
        yield "eta_refresh_wall_ms_p50", e["wall_ms_p50"]
        yield "eta_refresh_pinot_cpu_ms_p50", e["pinot_cpu_ms_p50"]

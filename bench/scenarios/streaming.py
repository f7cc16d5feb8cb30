"""Benchmark the stream job: micro-batch duration and event -> enriched latency.

A Kafka node of its own per run and the job through the launcher, driven by a synthetic
load shaped like the simulator's, compressed in time (kitchen statuses 2 s apart, then a
GPS point a second for ``--transit`` s), at ``--levels`` x the book's peak in orders (with
20 points an order, not the simulator's 990: its "100x" is 2.7x in real units,
contract/load.py, which the table's "x real" column states). Latency is
per output record, from the produce of the change that made its version to this
process's receipt, with p99 per 10 s so a growing lag shows; an order whose last record
never arrived counts (end of the drain - its last event), a lower bound. Batch durations
come from the job's progress lines. ``--variant "LABEL:K=V K=V"`` also runs the job with
those environment variables (``{run}`` in a value: the run's name).

    .venv/bin/python -m bench streaming --levels 10,100
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench import harness
from contract import geo
from contract import load as real
from contract.events import (
    LIFECYCLE,
    DeliveryLocation,
    OrderPlaced,
    OrderStatus,
    OrderStatusChanged,
    Topic,
    now_ms,
)
from localrun.launch import LaunchError, System
from runtime import kafka
from runtime.conf import KafkaConfig

SHOP = (12.9716, 77.5946)
HOME = (12.9352, 77.6245)
BATCH_RE = re.compile(r"streaming: batch=(\d+) rows=(\d+) duration_ms=(\d+)")


def pct(values: list[float], p: float) -> float | None:
    return harness.percentile(values, p) if values else None


def order_placed(order_id: int) -> OrderPlaced:
    return OrderPlaced.from_dict(
        {
            "event_id": str(uuid.uuid4()),
            "event_time": now_ms(),
            "order_id": order_id,
            "customer_id": order_id % 997 + 1,
            "customer_name": "Bench",
            "restaurant_id": order_id % 13 + 1,
            "restaurant_name": "Bench Pizza",
            "restaurant_lat": SHOP[0],
            "restaurant_lon": SHOP[1],
            "delivery_lat": HOME[0],
            "delivery_lon": HOME[1],
            "items": [
                {
                    "product_id": 1,
                    "name": "Margherita",
                    "category": "pizza",
                    "quantity": 1,
                    "unit_price": "9.50",
                }
            ],
            "total": "9.50",
        }
    )


class Load:
    """Schedules every event of every order on a heap and publishes them when due."""

    def __init__(
        self,
        rate_per_min: float,
        transit_s: int,
        seconds: float,
        changed_at: dict[tuple[int, int], int],
        linger_ms: int = 5,
    ) -> None:
        self.rate = rate_per_min / 60.0
        self.transit = transit_s
        self.seconds = seconds
        self.linger_ms = linger_ms
        self.sent = 0
        self.last_time: dict[int, int] = {}
        self.placed_at: dict[int, int] = {}
        #: (order, n) -> event_time of the order's n-th change: what its version n answers.
        self.changed_at = changed_at
        self._changes: dict[int, int] = {}

    def run(self, first_order_id: int) -> None:
        sent = kafka.Deliveries(kafka.producer(**{"linger.ms": self.linger_ms}))
        heap: list[tuple[float, int, str, int, int]] = []  # (due, seq, kind, order, step)
        seq = 0
        start = time.monotonic()
        next_order = start
        order_id = first_order_id
        while True:
            now = time.monotonic()
            while next_order <= now and next_order - start < self.seconds:
                heapq.heappush(heap, (next_order, seq, "placed", order_id, 0))
                seq += 1
                order_id += 1
                next_order += 1.0 / self.rate
            while heap and heap[0][0] <= now:
                due, _, kind, oid, step = heapq.heappop(heap)
                seq += 1
                for event, follow in self._event(kind, oid, step, due):
                    self._changes[oid] = n = self._changes.get(oid, 0) + 1
                    self.changed_at[(oid, n)] = event.event_time
                    sent.publish(event)
                    self.sent += 1
                    if follow is not None:
                        heapq.heappush(heap, (*follow[:1], seq, *follow[1:]))
                        seq += 1
            sent.producer.poll(0)
            if not heap and next_order - start >= self.seconds:
                break
            time.sleep(0.005)
        sent.flush(30)

    def _event(self, kind: str, oid: int, step: int, due: float):
        # Strictly increasing event times per order: when the generator is starved of CPU
        # two points can be sent in the same millisecond, and the join (rightly) treats
        # a point that is not newer than the last one as a duplicate.
        eid = str(uuid.uuid4())
        t = max(now_ms(), self.last_time.get(oid, 0) + 1)
        self.last_time[oid] = t
        if kind == "placed":
            placed = order_placed(oid)
            self.placed_at[oid] = placed.event_time
            yield placed, (due + 2, "status", oid, 1)
        elif kind == "status":
            status = LIFECYCLE[step]
            courier = oid % 50 + 1 if status in (OrderStatus.OUT_FOR_DELIVERY,) else None
            ev = OrderStatusChanged(
                event_id=eid,
                event_time=t,
                order_id=oid,
                placed_at=self.placed_at[oid],
                status=status.value,
                courier_id=courier,
            )
            if status is OrderStatus.OUT_FOR_DELIVERY:
                yield ev, (due + 1, "gps", oid, 1)
            elif status is OrderStatus.DELIVERED:
                yield ev, None
            elif status is OrderStatus.ARRIVING_AT_DOOR:
                yield ev, (due + 1, "status", oid, step + 1)
            else:
                yield ev, (due + 2, "status", oid, step + 1)
        else:
            lat, lon = geo.interpolate(*SHOP, *HOME, step / (self.transit + 1))
            ev = DeliveryLocation(
                event_id=eid,
                event_time=t,
                order_id=oid,
                placed_at=self.placed_at[oid],
                courier_id=oid % 50 + 1,
                lat=lat,
                lon=lon,
            )
            if step < self.transit:
                yield ev, (due + 1, "gps", oid, step + 1)
            else:
                arriving = LIFECYCLE.index(OrderStatus.ARRIVING_AT_DOOR)
                yield ev, (due + 1, "status", oid, arriving)


class Latencies:
    """Follows the enriched topics; records, per record, receive time - the time of the
    change that made its version (``changed_at``: the order's version-th event)."""

    def __init__(self, changed_at: dict[tuple[int, int], int]) -> None:
        self.changed_at = changed_at
        self.samples: dict[str, list[tuple[int, int]]] = {
            "orders_enriched": [],
            "delivery_statuses": [],
        }
        #: Per record (job ms: its change -> the job's sink produced it, read ms: produced ->
        #: received, topic, order, version, status, its change's time), to tell the job's
        #: share of a late record from Kafka's and this reader's.
        self.records: list[tuple[int, int, str, int, int, str, int]] = []
        self.stop = threading.Event()
        self.versions: dict[int, set[int]] = {}
        self.threads = [
            threading.Thread(target=self._follow, args=(t,), daemon=True)
            for t in (Topic.ORDERS_ENRICHED, Topic.DELIVERY_STATUSES)
        ]

    def _follow(self, topic: Topic) -> None:
        sink = self.samples[topic.value]
        for rec in kafka.iter_topic(topic, follow=True, stop=self.stop):
            received = now_ms()
            body = json.loads(rec.value)
            # A delivery status re-sent for a status change keeps its position's older
            # event_time (clients order points by it): its change is the status.
            changed = self.changed_at.get((body["order_id"], body["version"]), body["event_time"])
            sink.append((changed, received - changed))
            self.records.append(
                (
                    rec.timestamp - changed,
                    received - rec.timestamp,
                    topic.value,
                    body["order_id"],
                    body["version"],
                    body["status"],
                    changed,
                )
            )
            if topic is Topic.ORDERS_ENRICHED:
                self.versions.setdefault(body["order_id"], set()).add(body["version"])

    def since(self, t0: int, t1: int) -> dict[str, list[int]]:
        return {k: [lat for t, lat in v if t0 <= t < t1] for k, v in self.samples.items()}


def _split(records: list[tuple], t0: int, t1: int) -> dict[str, Any]:
    """Where the processed records' latency went: change -> the job's produce (the job),
    and produce -> this bench's receipt (Kafka's fetch and the bench's reader),
    overall and for the slowest 1% of records, with the 15 slowest themselves."""
    window = [r for r in records if t0 <= r[-1] < t1]
    if not window:
        return {}
    jobs, reads = [r[0] for r in window], [r[1] for r in window]
    slowest = sorted(window, key=lambda r: r[0] + r[1])[-max(1, len(window) // 100) :]
    fields = ("job_ms", "read_ms", "topic", "order", "version", "status", "event_time")
    return {
        "job_ms_p50_p99": [pct(jobs, 50), pct(jobs, 99)],
        "read_ms_p50_p99": [pct(reads, 50), pct(reads, 99)],
        "slowest_1pct_job_ms_p50": pct([r[0] for r in slowest], 50),
        "slowest_1pct_read_ms_p50": pct([r[1] for r in slowest], 50),
        "slowest_records": [dict(zip(fields, r, strict=True)) for r in heapq.nlargest(15, window)],
    }


def run_level(
    args: argparse.Namespace,
    multiple: int,
    order_base: int,
    label: str,
    overrides: dict[str, str],
    broker: System,
) -> dict:
    """One load level against a fresh job (fresh topics, checkpoint) on ``broker``'s Kafka,
    with ``overrides`` set in its environment. The broker's CPU is sampled beside the
    job's: the two share the machine's cores."""
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    os.environ["KAFKA_TOPIC_PREFIX"] = prefix
    kafka.ensure_topics(config=KafkaConfig())
    env = {
        **broker.env,
        "KAFKA_TOPIC_PREFIX": prefix,
        "STREAMING_CHECKPOINT_DIR": str(broker.workdir / prefix / "checkpoint"),
        "STREAMING_TRIGGER_MS": str(args.trigger_ms),
        "STREAMING_SHUFFLE_PARTITIONS": str(args.shuffle_partitions),
        "STREAMING_SPARK_CONF": args.spark_conf,
        **{k: v.replace("{run}", prefix.rstrip(".")) for k, v in overrides.items()},
    }
    load_avg = [os.getloadavg()[0]]
    # Warm up: one order so the first (slow) micro-batch completes and the job says ready.
    warm = kafka.Deliveries(kafka.producer())
    warm.publish(order_placed(order_base))
    warm.flush(10)
    started = time.monotonic()
    system = harness.start(["streaming"], env=env)
    ready_after = time.monotonic() - started
    job = system.child("streaming").process
    broker_pid = broker.pid("kafka")
    log_path = Path(system.env["ORDERTRACK_VAR_DIR"]) / "logs" / "streaming.log"
    changed_at: dict[tuple[int, int], int] = {}
    latencies = Latencies(changed_at)
    for t in latencies.threads:
        t.start()
    rss_samples: list[tuple[float, float]] = []  # (seconds since start, MiB), every 30 s
    # (seconds since start, the job's cores, the broker's cores) over each 30 s
    cpu_samples: list[tuple[float, float, float]] = []

    def sample_rss() -> None:
        began = time.monotonic()
        before: tuple[float, float, float] | None = None  # the last (time, job CPU, broker CPU)
        while not latencies.stop.is_set() and job.poll() is None:
            now = time.monotonic()
            rss_samples.append((round(now - began), round(harness.process_tree_rss(job.pid), 1)))
            cpu = (
                now,
                harness.process_tree_cpu(job.pid),
                harness.process_tree_cpu(broker_pid) if broker_pid else 0.0,
            )
            if before is not None:
                seconds = now - before[0]
                cpu_samples.append(
                    (
                        round(now - began),
                        round((cpu[1] - before[1]) / seconds, 2),
                        round((cpu[2] - before[2]) / seconds, 2),
                    )
                )
            before = cpu
            latencies.stop.wait(30)

    threading.Thread(target=sample_rss, daemon=True).start()
    try:
        load = Load(
            real.Load(multiple).orders_per_minute,
            args.transit,
            args.seconds,
            changed_at,
            args.linger_ms,
        )
        t0 = now_ms() + int(args.warmup * 1000)
        load.run(order_base + 1)
        t1 = now_ms()
        load_avg.append(os.getloadavg()[0])
        # Correctness: every order went through placed + 5 statuses + GPS points + 1 status,
        # so its last version must count all of them (none lost, none counted twice). A
        # micro-batch may fold several changes of one order into one record, so versions
        # in between may be skipped.
        per_order = 1 + (len(LIFECYCLE) - 1) + args.transit
        measured = [o for o, t in load.placed_at.items() if t0 <= load.last_time[o] < t1]
        # Let the tail drain: until every measured order's last record is out, at most 30 s.
        drain_until = time.monotonic() + 30
        while time.monotonic() < drain_until and any(
            max(latencies.versions.get(o, {0})) != per_order for o in measured
        ):
            time.sleep(0.2)
        drained = now_ms()
        lat = latencies.since(t0, t1)
        # Events not processed by now count too, as (now - their order's last event time).
        unprocessed = [
            drained - load.last_time[o]
            for o in measured
            if max(latencies.versions.get(o, {0})) != per_order
        ]
        orders = {k: v for k, v in latencies.versions.items() if k > order_base}
        complete = sum(1 for v in orders.values() if max(v) == per_order)
        missing = {k: max(v) for k, v in orders.items() if max(v) != per_order}
        rss = round(harness.process_tree_rss(job.pid), 1)
        restarts = system.child("streaming").restarts  # the job died during the run
    finally:
        latencies.stop.set()  # its consumers close before this level's broker stops
        system.stop()
        for t in latencies.threads:
            t.join(5)
    batches = []
    phases: dict[str, list[int]] = {}
    for line in log_path.read_text().splitlines():
        m = BATCH_RE.search(line)
        if m:
            batches.append((int(m[1]), int(m[2]), int(m[3])))
            if int(m[1]) >= 3:
                for key, value in re.findall(r"(\w+_ms)=(\d+)", line):
                    phases.setdefault(key, []).append(int(value))
    steady = [d for b, rows, d in batches if b >= 3]
    rows = [r for b, r, _ in batches if b >= 3]
    all_lat = lat["orders_enriched"] + lat["delivery_statuses"] + unprocessed
    windows = []
    samples = [
        (t, v)
        for topic in ("orders_enriched", "delivery_statuses")
        for t, v in latencies.samples[topic]
        if t0 <= t < t1
    ]
    for start in range(t0, t1, 10_000):
        window = [v for t, v in samples if start <= t < start + 10_000]
        windows.append(pct(window, 99))
    return {
        "code": label,
        "env": overrides,
        "multiple": multiple,
        "load_avg_1m_start_end": load_avg,
        "e2e_ms_p99_per_10s": windows,
        "lag_growth_longest_s": harness.longest_growth_s(windows),
        "unprocessed_at_end": len(unprocessed),
        "orders_per_min": real.Load(multiple).orders_per_minute,
        # Its orders bring the placement, 6 statuses and --transit points (27), not the
        # simulator's 998 events: its level in real units (contract/load.py).
        "real_multiple": round(
            real.equivalent(multiple, len(LIFECYCLE) + args.transit).multiple, 3
        ),
        "events_sent": load.sent,
        "events_per_s": round(load.sent / args.seconds, 1),
        "ready_after_s": round(ready_after, 1),
        "batches": len(steady),
        "rows_per_batch_p50": pct(rows, 50),
        "batch_ms_p50": pct(steady, 50),
        "batch_ms_p90": pct(steady, 90),
        "batch_ms_max": max(steady) if steady else None,
        "batch_ms_mean": round(statistics.mean(steady), 1) if steady else None,
        "latency_samples": len(all_lat),
        "orders_seen": len(orders),
        "orders_with_all_versions": complete,
        "incomplete_examples": dict(list(sorted(missing.items()))[:5]),
        "batch_phase_ms_p50": {k: pct(v, 50) for k, v in sorted(phases.items())},
        "e2e_ms_p50": pct(all_lat, 50),
        "e2e_ms_p99": pct(all_lat, 99),
        "e2e_ms_max": max(all_lat) if all_lat else None,
        **_split(latencies.records, t0, t1),
        "delivery_status_ms_p50": pct(lat["delivery_statuses"], 50),
        "delivery_status_ms_p99": pct(lat["delivery_statuses"], 99),
        "rss_mib_at_end": rss,
        "rss_mib_every_30s": rss_samples,
        "cores_job_broker_every_30s": cpu_samples,
        "job_restarts_during_run": restarts,
        "job_errors": [
            line[:600]
            for line in log_path.read_text().splitlines()
            if re.search(r"Error|Exception|Caused by|query failed", line)
        ][:20]
        if restarts
        else [],
    }


OPTIONS = {
    "--levels": ("10,100", "multiples of the book's peak"),
    "--trigger-ms": 100,
    "--shuffle-partitions": 2,
    "--spark-conf": ("", "extra Spark settings: k=v;k=v"),
    "--seconds": (40.0, "load duration per level"),
    "--warmup": (10.0, "seconds not measured"),
    "--transit": (20, "GPS points per delivery"),
    "--linger-ms": (5, "the load generator's producer linger, ms"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variant", action="append", default=[],
        help='also run the job as "LABEL:K=V K=V" (environment overrides); repeatable',
    )  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    codes: list[tuple[str, dict[str, str]]] = [("default", {})]
    for variant in args.variant:
        name, _, pairs = variant.partition(":")
        codes.append((name, dict(pair.split("=", 1) for pair in pairs.split())))
    results = []
    for i, level in enumerate(int(x) for x in args.levels.split(",")):
        for j, (label, overrides) in enumerate(codes):
            base = (i * len(codes) + j + 1) * 10_000_000
            # A Kafka node of its own per run, on a fresh data folder (removed after the
            # run), so no run inherits the topics or the log of the runs before it.
            with harness.system(["kafka"]) as broker:
                try:
                    result = run_level(args, level, base, label, overrides, broker)
                except (TimeoutError, OSError, LaunchError, kafka.Undelivered) as exc:
                    # One run that fails (a job that never became ready, events the broker
                    # did not acknowledge) leaves the others' results, and says so.
                    result = {"code": label, "env": overrides, "multiple": level}
                    result["failed"] = f"{type(exc).__name__}: {exc}"
            results.append(result)
            print(json.dumps(result), flush=True)

    columns = {
        head: (lambda r, key=key: str(r.get(key)))
        for head, key in (
            ("code", "code"), ("x orders", "multiple"), ("x real", "real_multiple"),
            ("ev/s", "events_per_s"),
            ("batches", "batches"), ("rows/b p50", "rows_per_batch_p50"),
            ("batch p50", "batch_ms_p50"), ("batch p90", "batch_ms_p90"),
            ("e2e p50", "e2e_ms_p50"), ("e2e p99", "e2e_ms_p99"),
            ("lag grew s", "lag_growth_longest_s"), ("unprocessed", "unprocessed_at_end"),
            ("complete", "orders_with_all_versions"), ("orders", "orders_seen"),
            ("RSS MiB", "rss_mib_at_end"),
        )
    }  # fmt: skip
    harness.print_columns(
        f"trigger={args.trigger_ms}ms, {args.seconds:.0f} s per level (times in ms)",
        results,
        columns,
    )
    for r in results:
        print(f"\n  {r['code']} at {r['multiple']}x:")
        if "failed" in r:
            print(f"{'':>12}   failed: {r['failed']}")
            continue
        print(f"{'':>12}   e2e p99 per 10 s: {r['e2e_ms_p99_per_10s']}")
        if "job_ms_p50_p99" in r:
            print(
                f"{'':>12}   event -> job's produce p50/p99 {r['job_ms_p50_p99']}, "
                f"produce -> bench p50/p99 {r['read_ms_p50_p99']}; slowest 1%: job "
                f"{r['slowest_1pct_job_ms_p50']}, read {r['slowest_1pct_read_ms_p50']}"
            )
        print(f"{'':>12}   batch phases p50: {r['batch_phase_ms_p50']}")
        cores = r.get("cores_job_broker_every_30s", [])
        print(
            f"{'':>12}   cores per minute (job, broker): "
            + ", ".join(f"{job:.2f}/{broker:.2f}" for _, job, broker in cores[1::2])
        )
    return {"results": results}

"""Capacity: the highest level of load the whole system carries on this machine while every
goal holds (issue 70), in real units (contract/load.py).

``make run``'s topology (every component through the one launcher), the simulator stepped
up ``--levels`` (1x, 2x, 3x, 5x, 8x the book's peak: each is stated in orders a minute,
status changes and GPS points a second). Between levels only the simulator restarts, at
the next rate; it resumes the rides in flight, so a level starts warm. A level counts once
its GPS points a second (over the last minute) are within ``--tolerance`` of what its
orders a minute imply, at most ``--settle-minutes`` after it began; then it is held for
``--minutes``. Per level, beside the load:

* a probe order followed on its customer's socket, again and again: API accept -> the fast
  ``status``/``position`` message, and -> the enriched ``update`` (freshness's probe);
* the REST order detail read at ``--reads`` a second by customers of their own orders;
* cores and RSS per component (each process tree; the simulator's reported apart and left
  out of the total: it stands for the customers' and couriers' phones), Kafka bytes a
  minute per topic (the broker's log files: after compression), Pinot rows a second per
  table (its consumed offsets) and every stage's lag (the operators' pipeline monitor).

A level holds when the fast paths' p99 <= 250 ms, the update's p99 <= 2 s, the REST
detail's p99 <= 250 ms at the asked rate, and no stage's lag grows for more than 60 s in a
row. Capacity = the highest level that holds; the ladder stops at the first that does not
(``--keep-going`` runs the rest).

    flock /work/heavy.lock .venv/bin/python -m bench capacity              # the ladder
    flock /work/heavy.lock .venv/bin/python -m bench capacity --levels 1 --minutes 1 \\
        --settle-minutes 1                                               # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from pathlib import Path

from bench import harness
from bench.scenarios import freshness, soak
from contract.events import Topic
from contract.load import Load
from localrun.launch import System

#: The goals a level must hold (issue 70's targets).
GOALS = {"fast_p99_ms": 250.0, "update_p99_ms": 2000.0, "rest_p99_ms": 250.0, "lag_growth_s": 60.0}
#: Seconds over which a level's GPS point rate is judged steady.
RATE_WINDOW_S = 60.0


class Sampler(threading.Thread):
    """Every ``every`` s while a level is held: CPU seconds and RSS of each component's
    process tree, Kafka's log bytes per topic, Pinot's consumed offsets, each stage's lag
    and the GPS points Kafka took."""

    def __init__(self, components: dict[str, int], workdir: Path, every: float) -> None:
        super().__init__(daemon=True)
        from tracker.operations.pipeline import PipelineMonitor

        self.components, self.workdir, self.every = components, workdir, every
        self.samples: list[dict] = []
        self.done = threading.Event()
        self.monitor = PipelineMonitor()

    def sample(self) -> dict:
        from django.db import close_old_connections

        from tracker.operations.pinot_controller import PinotController

        row: dict = {"t": time.monotonic(), "cpu_s": harness.cpu_of(self.components)}
        row["rss_mb"] = {n: round(harness.process_tree_rss(p)) for n, p in self.components.items()}
        row["kafka_bytes"] = kafka_log_bytes(self.workdir)
        row["points"] = points_so_far()
        try:
            with PinotController() as controller:
                row["pinot"] = {t: sum(p.values()) for t, p in controller.positions().items()}
        except Exception as exc:  # noqa: BLE001 - a sample, not the run
            row["pinot"] = f"error: {exc}"[:200]
        try:
            self.monitor.sample()
            row["lag"] = {s["name"]: s["lag"] for s in self.monitor.snapshot()["stages"]}
        except Exception as exc:  # noqa: BLE001 - a sample, not the run
            row["lag"] = f"error: {exc}"[:200]
        close_old_connections()
        return row

    def run(self) -> None:
        while True:
            self.samples.append(self.sample())
            if self.done.wait(self.every):
                self.samples.append(self.sample())
                return


def kafka_log_bytes(workdir: Path) -> dict[str, int]:
    """Bytes in each topic's log files now (Kafka stores batches as the producer compressed
    them): the difference between two reads is what was appended, while retention deletes
    nothing in between."""
    sizes: dict[str, int] = {}
    for segment in (workdir / "kafka" / "log").glob("*-*/*.log"):
        topic = segment.parent.name.rsplit("-", 1)[0]
        try:
            sizes[topic] = sizes.get(topic, 0) + segment.stat().st_size
        except FileNotFoundError:  # deleted by retention meanwhile
            continue
    return sizes


def points_so_far() -> int:
    """GPS points Kafka has taken (``delivery_locations``' end offsets)."""
    return sum(harness.offsets([Topic.DELIVERY_LOCATIONS])[Topic.DELIVERY_LOCATIONS].values())


def settle(level: Load, args: argparse.Namespace) -> dict:
    """Wait until the GPS points a second over the last minute are within the tolerance of
    the level's, at most ``--settle-minutes``: (seconds waited, the rate, steady or not)."""
    began = time.monotonic()
    seen: list[tuple[float, int]] = []
    rate = 0.0
    while not harness.STOP.is_set():
        now = time.monotonic()
        seen.append((now, points_so_far()))
        old = [s for s in seen if now - s[0] >= RATE_WINDOW_S]
        if old:
            start = old[-1]
            rate = (seen[-1][1] - start[1]) / (now - start[0])
            if abs(rate / level.points_per_second - 1) <= args.tolerance:
                return {"settle_s": round(now - began), "settle_points_per_s": round(rate),
                        "steady": True}  # fmt: skip
        if now - began >= args.settle_minutes * 60:
            break
        so_far = f"{rate:,.0f}" if old else "(a minute to measure)"
        print(
            f"  {level.multiple:g}x: {so_far} GPS points/s of {level.points_per_second:,.0f}"
            f" after {now - began:.0f} s",
            flush=True,
        )
        harness.STOP.wait(args.every)
    return {
        "settle_s": round(time.monotonic() - began),
        "settle_points_per_s": round(rate),
        "steady": False,
    }


async def beside(base: str, keys: dict, seconds: float, readers: int) -> tuple[dict, dict]:
    """Probe orders one after the other, and the REST readers, for ``seconds``."""
    deadline = time.monotonic() + seconds
    probed: dict = {"socket": {}, "push": [], "errors": 0}

    async def probes() -> None:
        while time.monotonic() < deadline and not harness.STOP.is_set():
            got = await freshness.probe(base, keys, 1, gps_points=5, rest_every=1.0)
            for name, values in got["socket"].items():
                probed["socket"].setdefault(name, []).extend(values)
            probed["push"].extend(got["push"])
            probed["errors"] += got["errors"]

    read = soak.readers_and_subscribers(base, seconds, readers, 0, [], {}, None)
    reads, _ = await asyncio.gather(read, probes())
    return probed, reads


def p99_ms(values: list[float]) -> float | None:
    return round(harness.percentile(values, 99) * 1000) if values else None


def judge(level: dict) -> list[str]:
    """The goals a held level missed (empty: it holds)."""
    missed = []
    for name, value in (
        ("fast status p99", level["socket_status_p99_ms"]),
        ("fast position p99", level["socket_position_p99_ms"]),
    ):
        if value is None or value > GOALS["fast_p99_ms"]:
            missed.append(f"{name} {value} ms")
    if level["update_p99_ms"] is None or level["update_p99_ms"] > GOALS["update_p99_ms"]:
        missed.append(f"update p99 {level['update_p99_ms']} ms")
    if level["rest_p99_ms"] is None or level["rest_p99_ms"] > GOALS["rest_p99_ms"]:
        missed.append(f"REST p99 {level['rest_p99_ms']} ms")
    if level["rest_per_s"] < 0.95 * level["rest_asked_per_s"]:
        missed.append(f"REST {level['rest_per_s']}/s of {level['rest_asked_per_s']:g}")
    for stage, grew in level["lag_growth_s"].items():
        if grew > GOALS["lag_growth_s"]:
            missed.append(f"{stage} lag grew {grew:.0f} s")
    if not level["steady"]:
        missed.append("never steady")
    return missed


def summarise(
    level: Load,
    samples: list[dict],
    probed: dict,
    reads: dict,
    steady: dict,
    args: argparse.Namespace,
) -> dict:
    first, last = samples[0], samples[-1]
    seconds = last["t"] - first["t"]
    cores = harness.cores(first["cpu_s"], last["cpu_s"], seconds)
    load_cores = {n: round(c, 3) for n, c in cores.items() if n != "simulator"}
    per_min = 60 / seconds
    kafka = {
        t: round((last["kafka_bytes"].get(t, 0) - first["kafka_bytes"].get(t, 0)) * per_min)
        for t in last["kafka_bytes"]
    }
    points = last["points"] - first["points"]
    pinot = (
        {t: round((last["pinot"][t] - first["pinot"].get(t, 0)) / seconds) for t in last["pinot"]}
        if isinstance(first["pinot"], dict) and isinstance(last["pinot"], dict)
        else {}
    )
    lags = [s["lag"] for s in samples if isinstance(s["lag"], dict)]
    stages = sorted({name for lag in lags for name in lag})
    socket = probed["socket"]
    result = {
        "level": level.describe(),
        "multiple": level.multiple,
        "orders_per_min": level.orders_per_minute,
        "points_per_s_asked": round(level.points_per_second),
        **steady,
        "held_s": round(seconds),
        "points_per_s": round(points / seconds),
        "socket_status_p99_ms": p99_ms(socket.get("status_new", [])),
        "socket_position_p99_ms": p99_ms(socket.get("gps_new", [])),
        "update_p99_ms": p99_ms(probed["push"]),
        "probe_changes": sum(len(v) for k, v in socket.items() if k.endswith("_new")),
        "probe_errors": probed["errors"],
        "rest_p99_ms": p99_ms(reads["rest_latency"]),
        "rest_per_s": round(reads["rest_requests"] / seconds, 1),
        "rest_asked_per_s": args.reads,
        "rest_errors": reads["rest_errors"],
        "cores": load_cores,
        "cores_total": round(sum(load_cores.values()), 2),
        "simulator_cores": round(cores.get("simulator", 0.0), 3),
        "rss_mb": last["rss_mb"],
        "kafka_bytes_per_min": kafka,
        # Every topic of the product (Kafka's own, __consumer_offsets and its metadata, not).
        "kafka_bytes_per_point": (
            round(sum(v for t, v in kafka.items() if not t.startswith("__")) / per_min / points, 1)
            if points
            else None
        ),
        "pinot_rows_per_s": pinot,
        "lag_max": {s: max((lag.get(s) or 0) for lag in lags) for s in stages},
        "lag_growth_s": {
            s: harness.longest_growth_s([lag.get(s) for lag in lags], step_s=args.every)
            for s in stages
        },
    }
    result["missed"] = judge(result)
    result["holds"] = not result["missed"]
    return result


def hold(
    launched: System, simulator: System, level: Load, args: argparse.Namespace, keys: dict
) -> dict:
    """One level, once steady, for ``--minutes``."""
    steady = settle(level, args)
    print(f"  {level.describe()}: {steady}", flush=True)
    components = {
        **harness.pids_of(c for c in launched.children if c.component.name != "simulator"),
        **harness.pids_of(simulator.children),
    }
    sampler = Sampler(components, Path(launched.workdir), args.every)
    sampler.start()
    readers = max(1, round(args.reads * soak.READER_PAUSE))
    probed, reads = asyncio.run(beside(launched.web_url, keys, args.minutes * 60, readers))
    sampler.done.set()
    sampler.join()
    return summarise(level, sampler.samples, probed, reads, steady, args)


def simulator_at(launched: System, level: Load, index: int) -> System:
    """The simulator alone, at ``level``, on the run's stores; it resumes the orders in
    flight."""
    log = (Path(launched.workdir) / f"simulator-{index}.log").open("w")  # noqa: SIM115
    env = {**launched.env, **harness.simulator_env(level.multiple)}
    return System(["simulator"], env=env, out=log).start()


OPTIONS = {
    "--levels": ("1,2,3,5,8", "multiples of the book's peak (1x: " + Load(1).describe()[3:] + ")"),
    "--minutes": (10.0, "minutes each level is held once steady"),
    "--settle-minutes": (60.0, "at most this long for a level's GPS points/s to be steady"),
    "--tolerance": (0.05, "how close the points/s must be to the level's"),
    "--reads": (50.0, "REST order-detail reads a second beside the load"),
    "--every": (10.0, "seconds between samples"),
    "--keep-going": (False, "run every level, past the first that does not hold"),
}


def run(args: argparse.Namespace) -> dict:
    harness.stop_on_signals()
    levels = [Load(float(m)) for m in args.levels.split(",") if m]
    launched = harness.start_full_system(levels[0].multiple, args.reads)
    simulator: System = launched
    results: list[dict] = []
    try:
        harness.wait_for_operator()
        keys = freshness.tokens(rest_every=1.0)
        for index, level in enumerate(levels):
            if harness.STOP.is_set():
                break
            if index:
                if simulator is launched:
                    launched.supervisor.stop_component("simulator")
                else:
                    simulator.stop()
                simulator = simulator_at(launched, level, index)
            result = hold(launched, simulator, level, args, keys)
            results.append(result)
            print(
                f"  {result['level']}: {'holds' if result['holds'] else 'misses'} "
                f"{', '.join(result['missed'])}",
                flush=True,
            )
            if not result["holds"] and not args.keep_going:
                break
    finally:
        if simulator is not launched:
            simulator.stop()
        launched.stop()
    held = [r["multiple"] for r in results if r["holds"]]
    capacity = max(held) if held else None
    columns = {
        "level": lambda r: f"{r['multiple']:g}x",
        "orders/min": lambda r: f"{r['orders_per_min']:g}",
        "points/s": lambda r: f"{r['points_per_s']:,} of {r['points_per_s_asked']:,}",
        "status p99": lambda r: str(r["socket_status_p99_ms"]),
        "position p99": lambda r: str(r["socket_position_p99_ms"]),
        "update p99": lambda r: str(r["update_p99_ms"]),
        "REST p99": lambda r: f"{r['rest_p99_ms']} at {r['rest_per_s']}/s",
        "cores": lambda r: f"{r['cores_total']} (+{r['simulator_cores']} sim)",
        "Kafka B/point": lambda r: str(r["kafka_bytes_per_point"]),
        "holds": lambda r: "yes" if r["holds"] else "no: " + "; ".join(r["missed"]),
    }
    harness.print_columns("Capacity ladder (times in ms)", results, columns)
    for r in results:
        print(f"\n  {r['level']}: cores {r['cores']}, RSS MiB {r['rss_mb']}")
        print(
            f"    Kafka bytes/min {r['kafka_bytes_per_min']}, Pinot rows/s {r['pinot_rows_per_s']}"
        )
        print(f"    lag max {r['lag_max']}, longest growth s {r['lag_growth_s']}")
    print(f"\nCapacity: {Load(capacity).describe() if capacity else 'no level held'}")
    return {
        "levels": results,
        "capacity_multiple": capacity,
        "goals": GOALS,
        "tolerance": args.tolerance,
        "label": f"{args.levels.replace(',', '-')}x",
    }

"""Fault drill: the replicated cluster under load, one fault at a time (issue 54).

docs/reliability.md, "Faults across a cluster", says what it runs, probes, samples and
judges. In short: the cluster of ``make run-prod`` with docker-compose.cluster.yml and
Debian's Prometheus on the production rules; ``--hold-minutes`` without faults (the load
holds, or the drill stops unless ``--faults-anyway``); then each of ``--faults`` in turn,
its recovery and ``--settle-minutes``; then a drain and PostgreSQL's counts against
Pinot's, and the issue's targets. Logs are kept beside the result when anything failed.

    nice .venv/bin/python -m bench fault_drill --multiple 5
    nice .venv/bin/python -m bench fault_drill --multiple 3 --faults kafka,pinot

``--recompute RESULT`` starts nothing: it derives a stored result's figures again from
what the run recorded, and prints them with what changed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from bench import harness
from contract.load import Load
from localrun.launch import environ

#: A state counts as reached (recovered, cleared) once it has held this long.
STABLE_S = 10.0
#: The load holds when no stage's lag grows for longer than this in a row (issue 29's bar).
LAG_GROWTH_LIMIT_S = 60.0
#: ... and the simulator reaches this share of the rate asked.
REACHED_SHARE = 0.9
#: The Pinot server killed (either holds every table) and how long PostgreSQL stays down.
PINOT_SERVER, POSTGRES_DOWN_S = "server", 20.0
PROMETHEUS_YML = harness.ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERT_RULES = harness.ROOT / "deploy" / "prometheus" / "alerts.yml"


def alert_threshold(alert: str, metric: str) -> float:
    """The ``max(metric) > N`` of ``alert`` in deploy/prometheus/alerts.yml."""
    import yaml

    rules = [r for g in yaml.safe_load(ALERT_RULES.read_text())["groups"] for r in g["rules"]]
    expr = next(r["expr"] for r in rules if r.get("alert") == alert)
    return float(re.search(rf"max\({metric}\) > ([\d.]+)", expr)[1])


#: ``/metrics`` shows an outbox backlog above the OutboxBacklogGrowing alert's threshold.
OUTBOX_ALERT_ROWS = round(alert_threshold("OutboxBacklogGrowing", "ordertrack_outbox_backlog_rows"))
STOP = harness.STOP  # no further fault starts; the run drains and is written as it stands


def cluster_files() -> list[Path]:
    from localrun.compose.file import CLUSTER_FILE, COMPOSE_FILE

    return [COMPOSE_FILE, CLUSTER_FILE]


# ------------------------------------------------------------------ the cluster's parts


def kafka_nodes(plan) -> dict[int, str]:  # noqa: ANN001 - an localrun.compose.plan.Plan
    """Kafka node id -> the process running it, as each launcher reads its command line."""
    from localrun.kafka import launcher_node

    nodes = {}
    for name, (argv, env) in plan.processes.items():
        if plan.role(name) == "kafka":
            with environ(env):
                nodes[launcher_node(argv[3:]).node_id] = name  # after python -m localrun.kafka
    return nodes


def spark_workers(plan) -> dict[int, str]:  # noqa: ANN001
    """A Spark worker's UI port -> its process."""
    return {
        int(argv[argv.index("--webui-port") + 1]): name
        for name, (argv, _) in plan.processes.items()
        if plan.role(name) == "spark-worker"
    }


def pinot_servers(plan) -> dict[str, int]:  # noqa: ANN001
    """Each Pinot server of the run (localrun.pinot's names: ``server``, ``server-2``...)
    -> its admin port, as the Pinot launcher reads its environment."""
    from localrun.pinot.conf import Ports

    with environ(plan.processes["pinot-broker"][1]):
        ports = Ports.from_env()
    return {name: admin for name, (_, admin) in ports.servers().items()}


def metrics_targets(plan) -> dict[str, tuple[str, int]]:  # noqa: ANN001
    """Every process serving ``/metrics`` -> (its Prometheus job, its port)."""
    from runtime.metrics import PORTS

    targets = {}
    for name, (_, env) in plan.processes.items():
        role = plan.role(name)
        if role == "web" and env.get("WEB_METRICS_PORT"):
            port = int(env["WEB_METRICS_PORT"])
        elif role in PORTS:
            variable, default = PORTS[role]
            port = int(env.get(variable) or default)
        else:
            continue
        if port > 0:
            targets[name] = (role, port)
    return targets


def busiest_partition(before: dict, after: dict) -> tuple[str, int]:
    """The (topic, partition) that took the most records between two reads of the end
    offsets ((topic, partition) -> offset); a tie goes to the first by name."""
    return max(sorted(after), key=lambda key: after[key] - before.get(key, 0))


def leader_of(metadata, topic: str, partition: int) -> int:  # noqa: ANN001 - ClusterMetadata
    """The node leading ``partition`` of ``topic`` (-1 while it has none)."""
    return metadata.topics[topic].partitions[partition].leader


def under_replicated(metadata, topics: Iterable[str]) -> list[str]:  # noqa: ANN001
    """``topic/partition`` of every partition with fewer replicas in sync than it has."""
    return [
        f"{topic}/{p.id}"
        for topic in topics
        for p in metadata.topics[topic].partitions.values()
        if len(p.isrs) < len(p.replicas)
    ]


def executor_worker(app_name: str, master: dict, workers: dict[str, dict]) -> str | None:
    """The UI address of the worker running the most executors of ``app_name`` (the
    master's and each worker's ``/json/``); None when none runs one."""
    app = next((a for a in master.get("activeapps") or [] if a.get("name") == app_name), None)
    if app is None:
        return None
    running = {
        url: sum(1 for e in state.get("executors") or [] if e.get("appid") == app["id"])
        for url, state in sorted(workers.items())
    }
    best = max(running, key=running.get, default=None)
    return best if best is not None and running[best] else None


def busiest_web(sockets: dict[str, float]) -> str:
    """The web process with the most WebSockets open (a tie: the first by name)."""
    return max(sorted(sockets), key=lambda name: sockets[name])


# ------------------------------------------------------------------ what /metrics shows


def _samples(text: str) -> Iterator:  # noqa: ANN401 - prometheus_client Samples
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        yield from family.samples


def sockets_open(text: str) -> float:
    """WebSockets open in one web process (every kind, every worker)."""
    return sum(s.value for s in _samples(text) if s.name == "ordertrack_websockets_open")


def metric_signals(
    texts: dict[str, str | None], errors_before: dict[str, float]
) -> tuple[set[str], dict[str, float]]:
    """What the scraped ``/metrics`` (None: not answering) show is wrong: a process not
    answering, a stage behind or stalled, the outbox over its alert's threshold, a dependency
    unreachable, replicas missing, a web process's 5xx count grown since ``errors_before``
    (returned, to pass back next time; a count gone down is a restarted process's)."""
    signals: set[str] = set()
    errors: dict[str, float] = {}
    stages: dict[str, str] = {}
    for name, text in texts.items():
        if text is None:
            signals.add(f"{name} /metrics not answering")
            continue
        for sample in _samples(text):
            if sample.name in (
                "ordertrack_pipeline_stage_stalled",
                "ordertrack_pipeline_stage_behind",
            ):
                if sample.value >= 1:
                    stage = sample.labels.get("stage", "?")
                    worst = "stalled" if sample.name.endswith("stalled") else "behind"
                    if stages.get(stage) != "stalled":
                        stages[stage] = worst
            elif sample.name == "ordertrack_dependency_up" and sample.value == 0:
                signals.add(f"{sample.labels.get('dependency', '?')} unreachable")
            elif sample.name == "ordertrack_replicas_missing" and sample.value > 0:
                signals.add(f"{sample.labels.get('store', '?')} replicas missing")
            elif (
                sample.name == "ordertrack_outbox_backlog_rows" and sample.value > OUTBOX_ALERT_ROWS
            ):
                signals.add(f"outbox backlog over {OUTBOX_ALERT_ROWS} rows")
            elif sample.name == "ordertrack_http_request_duration_seconds_count":
                errors.setdefault(name, 0.0)
                if sample.labels.get("status", "").startswith("5"):
                    errors[name] += sample.value
    signals.update(f"stage {stage} {status}" for stage, status in stages.items())
    for name, count in errors.items():
        before = errors_before.get(name)
        if before is not None and (count > before or (count < before and count > 0)):
            signals.add(f"{name} answered 5xx")
    return signals, errors


# ------------------------------------------------------------------ Prometheus


def prometheus_config(targets: dict[str, list[str]], own_address: str) -> dict:
    """deploy/prometheus/prometheus.yml with its rules, each job scraping this run's
    processes of that role (``targets``: job -> addresses)."""
    import yaml

    production = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = []
    for job in production["scrape_configs"]:
        name = job["job_name"]
        addresses = [own_address] if name == "prometheus" else targets.get(name, [])
        if addresses:
            jobs.append({"job_name": name, "static_configs": [{"targets": addresses}]})
    return {
        "global": production["global"],
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": jobs,
    }


@dataclass
class Prometheus:
    """Debian's Prometheus (``apt-get install prometheus``) on a free loopback port."""

    process: subprocess.Popen
    url: str
    log: Path

    @classmethod
    def start(cls, workdir: Path, targets: dict[str, list[str]]) -> Prometheus:
        import httpx
        import yaml

        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit(
                "prometheus not found: the drill evaluates the production alert rules with "
                "Debian's Prometheus (apt-get install prometheus)"
            )
        address = f"127.0.0.1:{harness.free_port()}"
        folder = workdir / "prometheus"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(targets, address)))
        log = folder / "prometheus.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address={address}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        prometheus = cls(process, f"http://{address}", log)
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{prometheus.url}/-/ready", timeout=2).status_code == 200:
                    return prometheus
            if process.poll() is not None or time.monotonic() > deadline:
                prometheus.stop()
                raise RuntimeError(f"Prometheus did not start: see {log}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ------------------------------------------------------------------ reading the samples


def first_stable(points: list[tuple[float, bool]], start: float, stable_s: float) -> float | None:
    """The first time at or after ``start`` from which the condition of ``points``
    ((time, holds), in time order) held at every point for at least ``stable_s``."""
    since = None
    for t, holds in points:
        if t < start:
            continue
        if not holds:
            since = None
            continue
        if since is None:
            since = t
        if t - since >= stable_s:
            return since
    return None


def pipeline_ok(sample: dict) -> bool:
    """Every stage ok (its lag under the threshold, moving) in one health sample."""
    stages = (sample.get("pipeline") or {}).get("stages")
    return bool(stages) and all(s["status"] == "ok" for s in stages.values())


def recovered_at(samples: list[dict], start: float, stable_s: float = STABLE_S) -> float | None:
    """When, from ``start`` on, every stage was back under its threshold and stayed so."""
    points = [(s["t"], pipeline_ok(s)) for s in samples if "pipeline" in s]
    return first_stable(points, start, stable_s)


def shown_and_cleared(
    points: list[tuple[float, Iterable[str]]], start: float, end: float, stable_s: float = STABLE_S
) -> dict:
    """When something beyond the baseline (what showed just before ``start``) first showed
    in ``[start, end]`` and when only the baseline held again for ``stable_s``, in seconds
    from ``start``; and all that showed in between."""
    before = [set(what) for t, what in points if t < start]
    baseline = before[-1] if before else set()
    shown = None
    for t, what in points:
        if start <= t <= end and set(what) - baseline:
            shown = t
            break
    cleared = None
    showed: set[str] = set()
    if shown is not None:
        after = [(t, not (set(what) - baseline)) for t, what in points if t >= shown]
        cleared = first_stable(after, shown, stable_s)
        last = cleared if cleared is not None else float("inf")
        for t, what in points:
            if shown <= t <= last:
                showed |= set(what) - baseline
    return {
        "baseline": sorted(baseline),
        "shown_s": None if shown is None else round(shown - start, 1),
        "cleared_s": None if cleared is None else round(cleared - start, 1),
        "what": sorted(showed),
    }


def probes_between(probes: list[dict], start: float, end: float) -> list[dict]:
    """The probes begun between ``start`` and ``end``, in that order: what a probe does
    first (its read of an earlier order) happened then."""
    return sorted((p for p in probes if start <= p["t"] < end), key=lambda p: p["t"])


def probes_ended(probes: list[dict], start: float, end: float) -> list[dict]:
    """The probes whose outcome (known when a probe ends) came in ``[start, end)``: a probe
    begun in one fault's window can end in the next one's, and counts there."""
    return sorted((p for p in probes if start <= p["end"] < end), key=lambda p: p["t"])


def failure_spans(probes: list[dict], since: float | None = None) -> dict:
    """Probes failed and the longest run of failures (first failure's start to the next
    pass's start); a probe begun before ``since`` counts from ``since``."""
    longest, run, failed = 0.0, None, 0
    for row in probes:
        t = row["t"] if since is None else max(row["t"], since)
        if not row["ok"]:
            failed += 1
            run = t if run is None else run
        elif run is not None:
            longest, run = max(longest, t - run), None
    if run is not None:
        last = max(p.get("end", p["t"]) for p in probes if not p["ok"])
        longest = max(longest, last - run)
    return {"total": len(probes), "failed": failed, "longest_failure_s": round(longest, 1)}


def latencies(probes: list[dict], key: str) -> list[tuple[float, float]]:
    """(when seen, seconds) of every latency under ``key`` (``accept_to_socket``,
    ``accept_to_rest``)."""
    return [
        (p["accepted"][what] + seconds, seconds)
        for p in probes
        for what, seconds in (p.get(key) or {}).items()
    ]


def p99_of(probes: list[dict], key: str, start: float, end: float) -> dict:
    """p99 of the latencies under ``key`` seen in ``[start, end)``, their count, and the
    probes ended then that measured none."""
    values = [seconds for t, seconds in latencies(probes, key) if start <= t < end]
    return {
        "p99_s": round(harness.percentile(values, 99), 3) if values else None,
        "n": len(values),
        "probes_without": sum(1 for p in probes_ended(probes, start, end) if not p.get(key)),
    }


def polls_between(probes: list[dict], start: float, end: float) -> list[tuple[float, int]]:
    """(time, HTTP status) of every REST detail read the probes made between ``start``
    and ``end``."""
    return [
        (t, status) for p in probes for t, status in p.get("rest_polls") or [] if start <= t < end
    ]


def reconnects(probe: dict) -> list[float]:
    """When the drop came that each reconnect of a probe's socket followed: a drop written
    ``closed ...`` ended an open connection, any other an attempt that never opened."""
    drops = probe.get("drops") or []
    opened_after = [
        drops[i - 1][0] if i else None
        for i, (_, why) in enumerate(drops)
        if why.startswith("closed")
    ]
    if probe.get("reconnects", 0) + 1 > len(opened_after):
        opened_after.append(drops[-1][0] if drops else None)
    return opened_after[1:]


def longest_refusal(polls: list[tuple[float, int]], status: int = 503) -> float:
    """The longest stretch of REST answers with ``status`` (merged over the probes): from
    the first such answer to the next other answer."""
    longest, since = 0.0, None
    for t, code in sorted(polls):
        if code == status:
            since = t if since is None else since
        elif since is not None:
            longest, since = max(longest, t - since), None
    if since is not None:
        longest = max(longest, max(t for t, _ in polls) - since)
    return round(longest, 1)


def hold_verdict(
    probes: list[dict],
    samples: list[dict],
    orders: tuple[int, int],
    minutes: float,
    asked_per_min: float,
    every: float,
) -> dict:
    """Whether the load held over the fault-free phase: every probe passed, no stage's lag
    grew for more than 60 s in a row, and the simulator reached 90% of the rate asked."""
    passed = sum(p["ok"] for p in probes)
    growth = {}
    stages = sorted({n for s in samples for n in ((s.get("pipeline") or {}).get("stages") or {})})
    for stage in stages:
        series = [
            ((s.get("pipeline") or {}).get("stages") or {}).get(stage, {}).get("lag")
            for s in samples
        ]
        growth[stage] = harness.longest_growth_s(series, every)
    reached = (orders[1] - orders[0]) / minutes if minutes else 0.0
    reasons = []
    if not probes or passed < len(probes):
        reasons.append(f"{len(probes) - passed} of {len(probes)} probes failed")
    if any(s > LAG_GROWTH_LIMIT_S for s in growth.values()):
        reasons.append(f"lag grew for more than {LAG_GROWTH_LIMIT_S:g} s: {growth}")
    if reached < REACHED_SHARE * asked_per_min:
        reasons.append(f"{reached:.0f} orders/min reached of {asked_per_min:.0f} asked")
    return {
        "held": not reasons,
        "why_not": reasons,
        "probes_passed": passed,
        "probes": len(probes),
        "lag_growth_longest_s": growth,
        "orders_per_min_asked": asked_per_min,
        "orders_per_min_reached": round(reached, 1),
    }


# ------------------------------------------------------------------ the faults


@dataclass
class FaultRecord:
    """One fault as it happened (times in seconds since the drill started)."""

    name: str
    target: str = ""
    t_inject: float | None = None
    #: Its hold released (or, for what the supervisor restarts by itself, t_inject).
    t_repair: float | None = None
    #: The process back and ready.
    t_ready: float | None = None
    #: Every stage back under its threshold (for STABLE_S).
    t_recovered: float | None = None
    t_end: float | None = None
    #: The ids of the orders placed from the fault to the end of its window.
    orders: tuple[int, int] | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    error: str | None = None


class Drill:
    """The running drill: the system, the clock, and what every part recorded."""

    def __init__(self, system: harness.ProductionSystem, args, people: dict) -> None:  # noqa: ANN001
        plan = system.plan
        self.system, self.args, self.people = system, args, people
        self.t0 = time.monotonic()
        self.probes: list[dict] = []
        self.strip: list[dict] = []
        self.faults: list[FaultRecord] = []
        self.hold: dict = {}
        self.kafka_nodes = kafka_nodes(plan)
        self.spark_workers = spark_workers(plan)
        self.pinot_servers = pinot_servers(plan)
        self.metrics = metrics_targets(plan)
        self.pinot_dir = plan.var / "app" / "pinot"
        self.hold_dir = system.run.app.hold_dir
        self.hold_dir.mkdir(parents=True, exist_ok=True)
        self.spark_ui = plan.ports.spark_ui
        self.prometheus_url: str | None = None
        self.sampler: HealthSampler | None = None

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def say(self, text: str) -> None:
        print(f"  [{self.now() / 60:5.1f} min] {text}", flush=True)

    def prometheus_targets(self) -> dict[str, list[str]]:
        jobs: dict[str, list[str]] = {}
        for job, port in self.metrics.values():
            jobs.setdefault(job, []).append(f"127.0.0.1:{port}")
        return jobs

    def restarts(self) -> dict[str, int]:
        return {c.component.name: c.restarts for c in self.system.children}

    def samples(self) -> list[dict]:
        return list(self.sampler.samples) if self.sampler else []

    # -------------------------------------------------------------- acting on processes

    def kill(self, rec: FaultRecord, name: str, sig: int, hold: bool, group: bool = True) -> int:
        """Signal process ``name`` (with all it started, as a container's death would, when
        ``group``), its hold file first when it must stay down."""
        pid = self.system.child(name).process.pid
        if hold:
            (self.hold_dir / name).touch()
        rec.t_inject = self.now()
        (os.killpg if group else os.kill)(pid, sig)
        self.say(f"{rec.name}: signal {signal.Signals(sig).name} to {name} (pid {pid})")
        return pid

    async def release(self, rec: FaultRecord, name: str, pid: int) -> None:
        """Remove the hold file once the supervisor holds the process (else it would take
        the exit for a crash); then wait until it is started again and ready."""
        child = self.system.child(name)
        await until(lambda: child.held, 60, every=0.2)
        (self.hold_dir / name).unlink(missing_ok=True)
        rec.t_repair = self.now()
        self.say(f"{rec.name}: {name} released")
        await self.wait_ready(rec, name, pid)

    async def wait_ready(self, rec: FaultRecord, name: str, pid: int) -> None:
        child = self.system.child(name)

        def again() -> bool:
            return child.process is not None and child.process.pid != pid and child.ready.is_set()

        if await until(again, 300, every=0.2):
            rec.t_ready = self.now()
            self.say(f"{rec.name}: {name} ready again")
        else:
            self.say(f"{rec.name}: !! {name} not ready 300 s later")

    async def process_fault(
        self, rec: FaultRecord, name: str, sig: int, down_s: float | None, group: bool = True,
        meanwhile: Callable[[], Awaitable] | None = None,
    ) -> None:  # fmt: skip
        """Signal ``name`` (then await ``meanwhile()``); keep it down ``down_s`` and release
        it, or (None) let the supervisor start it again at once, as compose's would."""
        pid = self.kill(rec, name, sig, hold=down_s is not None, group=group)
        if meanwhile is not None:
            await meanwhile()
        if down_s is None:
            rec.t_repair = rec.t_inject
            await self.wait_ready(rec, name, pid)
            return
        await asyncio.sleep(max(0.0, rec.t_inject + down_s - self.now()))
        await self.release(rec, name, pid)

    # -------------------------------------------------------------- phases

    async def run(self) -> None:
        stop = asyncio.Event()
        probing = asyncio.create_task(self.probe_loop(stop))
        strip = asyncio.create_task(self.follow_strip())
        try:
            await self.hold_phase()
            if not self.hold.get("held") and not self.args.faults_anyway:
                self.say(
                    f"the load did not hold ({'; '.join(self.hold['why_not'])}): no "
                    "faults; run again with a lower --multiple"
                )
                return
            for name in self.args.faults:
                if STOP.is_set():
                    break
                await self.run_fault(name)
        finally:
            stop.set()
            await probing
            strip.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await strip

    def check_running(self) -> None:
        """A process that kept failing makes the supervisor stop the whole run (a fourth
        exit): nothing after that would measure the product."""
        run = self.system.run
        if run.app.failed.is_set() or run.infra.failed.is_set():
            raise RuntimeError(f"the supervisor stopped the run: see {run.plan.var}/app/logs")

    async def pause(self, seconds: float) -> None:
        """Sleep, ending early when the drill is stopped."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not STOP.is_set():
            self.check_running()
            await asyncio.sleep(min(1.0, deadline - time.monotonic()))

    async def hold_phase(self) -> None:
        self.say(f"hold: {self.args.hold_minutes:g} min without faults")
        start, first = self.now(), await asyncio.to_thread(order_count)
        await self.pause(self.args.hold_minutes * 60)
        end, last = self.now(), await asyncio.to_thread(order_count)
        minutes = (end - start) / 60
        self.hold = {
            "start": start,
            "end": end,
            **hold_verdict(
                probes_ended(self.probes, start, end),
                [s for s in self.samples() if start <= s["t"] < end],
                (first, last),
                minutes,
                Load(self.args.multiple).orders_per_minute,
                self.args.sample_every,
            ),
        }
        self.say(
            f"hold: {'held' if self.hold['held'] else 'NOT held'} "
            f"({self.hold['orders_per_min_reached']} orders/min)"
        )

    async def run_fault(self, name: str) -> None:
        rec = FaultRecord(name)
        self.faults.append(rec)
        before = await asyncio.to_thread(max_order_id)
        rec.restarts = self.restarts()
        try:
            await FAULT_RUNNERS[name](self, rec)
        except Exception as exc:  # noqa: BLE001 - recorded; the drill goes on to recover
            rec.error = f"{type(exc).__name__}: {exc}"[:500]
            self.say(f"{name}: !! {rec.error}")
            if rec.t_inject is None:
                rec.t_inject = self.now()
        if rec.t_repair is None:
            rec.t_repair = rec.t_ready or self.now()
        await self.wait_recovered(rec)
        await self.pause(self.args.settle_minutes * 60)
        rec.t_end = self.now()
        rec.orders = (before + 1, await asyncio.to_thread(max_order_id))
        after = self.restarts()
        rec.restarts = {
            k: after[k] - rec.restarts.get(k, 0)
            for k in after
            if after[k] != rec.restarts.get(k, 0)
        }

    async def wait_recovered(self, rec: FaultRecord) -> None:
        """Until every stage is back under its threshold (stable) and a probe begun after
        the repair passed, at most ``--recover-minutes``."""
        deadline = time.monotonic() + self.args.recover_minutes * 60
        while time.monotonic() < deadline and not STOP.is_set():
            self.check_running()
            at = recovered_at(self.samples(), rec.t_repair)
            passed = any(p["ok"] and p["t"] >= rec.t_repair for p in self.probes)
            if at is not None and passed:
                rec.t_recovered = at
                self.say(f"{rec.name}: recovered ({at - rec.t_inject:.0f} s after the fault)")
                return
            await asyncio.sleep(1)
        self.say(f"{rec.name}: !! not recovered within {self.args.recover_minutes:g} min")

    # -------------------------------------------------------------- probes and the strip

    async def probe_loop(self, stop: asyncio.Event) -> None:
        running: set[asyncio.Task] = set()
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            task = asyncio.create_task(self.one_probe(n))
            running.add(task)
            task.add_done_callback(running.discard)
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), max(0.0, self.args.probe_every - (time.monotonic() - started))
                )
        if running:
            await asyncio.gather(*running)

    async def one_probe(self, n: int) -> None:
        t = self.now()
        row = await harness.probe(
            self.system.endpoint, self.people, n, deliver=True, clock=self.now
        )
        row["t"], row["end"] = t, self.now()
        self.probes.append(row)
        if not row["ok"]:
            self.say(f"probe {n}: FAIL at {row['step']}: {row.get('error', '')[:160]}")

    async def follow_strip(self) -> None:
        """The operators' socket, as the operations page keeps it: every ``pipeline``
        message (what the strip draws), and every drop (then it reconnects)."""
        import websockets

        endpoint, rng, attempt = self.system.endpoint, random.Random(54), 0
        while True:
            try:
                async with websockets.connect(
                    endpoint.ws_url("/ws/operations/"),
                    open_timeout=30,
                    **endpoint.ws_options(self.people["operator"]),
                ) as ws:
                    async for raw in ws:
                        message = json.loads(raw)
                        if message.get("type") != "pipeline":
                            continue
                        attempt = 0
                        self.strip.append(
                            {
                                "t": self.now(),
                                "status": message["status"],
                                "stages": {s["name"]: s["status"] for s in message["stages"]},
                            }
                        )
                why = f"closed {ws.close_code}"
            except websockets.ConnectionClosed as exc:
                why = f"closed {exc.rcvd.code if exc.rcvd else 'without a close frame'}"
            except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                why = f"{type(exc).__name__}: {exc}"[:200]
            self.strip.append({"t": self.now(), "drop": why})
            await asyncio.sleep(harness.reconnect_delay(attempt, rng))
            attempt += 1


def order_count() -> int:
    from django.db import connection

    from tracker.orders.models import Order

    try:
        return Order.objects.count()
    finally:
        connection.close()


def max_order_id(timeout: float = 120) -> int:
    """The newest order's id (retried while the database does not answer)."""
    from django.db import connection
    from django.db.models import Max

    from tracker.orders.models import Order

    deadline = time.monotonic() + timeout
    while True:
        try:
            return Order.objects.aggregate(n=Max("id"))["n"] or 0
        except Exception:  # noqa: BLE001 - PostgreSQL restarting
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
        finally:
            connection.close()


async def until(check: Callable[[], object], timeout: float, every: float = 1.0) -> object:
    """``check()`` (in a thread: it may block) every ``every`` s until it returns something
    true, which is returned; None after ``timeout``. A check that raises counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if found := await asyncio.to_thread(check):
                return found
        await asyncio.sleep(every)
    return None


async def kafka_fault(drill: Drill, rec: FaultRecord) -> None:
    from contract.events import Topic, topic_name
    from runtime import kafka

    topics = [topic_name(t) for t in Topic if t is not Topic.DEAD_LETTERS]  # the product's

    def ends() -> dict[tuple[str, int], int]:
        now = harness.offsets(topics)
        return {(topic, p): offset for topic in topics for p, offset in now[topic].items()}

    def cluster_metadata():  # noqa: ANN202 - confluent_kafka.admin.ClusterMetadata
        return kafka.admin().list_topics(timeout=10)

    before = await asyncio.to_thread(ends)
    await asyncio.sleep(10)
    after = await asyncio.to_thread(ends)
    topic, partition = busiest_partition(before, after)
    leader = leader_of(await asyncio.to_thread(cluster_metadata), topic, partition)
    name = drill.kafka_nodes[leader]
    rec.target = f"{name} (node {leader}), leader of {topic} partition {partition}"
    rec.extra["records_in_10_s"] = after[(topic, partition)] - before.get((topic, partition), 0)

    def new_leader() -> int | None:  # the controller elects one among the others
        now = leader_of(cluster_metadata(), topic, partition)
        return None if now in (-1, leader) else now

    async def elected() -> None:
        if (now := await until(new_leader, 120, every=0.5)) is not None:
            rec.extra["leader_changed_s"] = round(drill.now() - rec.t_inject, 1)
            rec.extra["new_leader"] = drill.kafka_nodes.get(now, now)

    await drill.process_fault(rec, name, signal.SIGKILL, drill.args.down_seconds, meanwhile=elected)
    # Caught up: one broker may be lost again.
    in_sync = lambda: not under_replicated(cluster_metadata(), topics)  # noqa: E731
    synced = await until(in_sync, drill.args.recover_minutes * 60)
    rec.extra["in_sync_s"] = round(drill.now() - rec.t_ready, 1) if synced else None


async def pinot_fault(drill: Drill, rec: FaultRecord) -> None:
    """A Pinot server's JVM (its launcher's child, kept down by its own hold file)."""
    import httpx

    name = PINOT_SERVER
    pidfile, hold = drill.pinot_dir / f"{name}.pid", drill.pinot_dir / f"{name}.hold"
    pid = int(pidfile.read_text())
    rec.target = f"Pinot {name} (pid {pid})"
    hold.touch()
    rec.t_inject = drill.now()
    os.kill(pid, signal.SIGKILL)
    drill.say(f"pinot: SIGKILL to {name} (pid {pid})")
    await asyncio.sleep(drill.args.down_seconds)
    hold.unlink(missing_ok=True)
    rec.t_repair = drill.now()
    readiness = f"http://127.0.0.1:{drill.pinot_servers[name]}/health/readiness"

    def ready() -> bool:
        return (
            int(pidfile.read_text()) != pid and httpx.get(readiness, timeout=2).status_code == 200
        )

    if await until(ready, 300, every=0.5):
        rec.t_ready = drill.now()
        drill.say(f"pinot: {name} ready again")


async def spark_fault(drill: Drill, rec: FaultRecord) -> None:
    import httpx

    app = stream_app_name()

    def state(url: str) -> dict:
        return httpx.get(f"{url}/json/", timeout=5).raise_for_status().json()

    def cluster() -> tuple[dict, dict[str, dict]]:
        """The master's state and each alive worker's."""
        master = state(f"http://127.0.0.1:{drill.spark_ui}")
        alive = [w for w in master.get("workers") or [] if w.get("state") == "ALIVE"]
        return master, {w["webuiaddress"]: state(w["webuiaddress"]) for w in alive}

    def executors(workers: dict[str, dict]) -> int:
        return sum(
            e.get("appid") == app_id for w in workers.values() for e in w.get("executors") or []
        )

    master, workers = await asyncio.to_thread(cluster)
    url = executor_worker(app, master, workers)
    if url is None:
        raise RuntimeError("no Spark worker runs an executor of the stream job")
    app_id = next(a["id"] for a in master["activeapps"] if a.get("name") == app)
    had = executors(workers)
    name = drill.spark_workers[urlparse(url).port]
    rec.target = f"{name}, running the stream job's executor ({had} executors in all)"
    await drill.process_fault(rec, name, signal.SIGKILL, None)
    # The master starts executors to replace the lost.
    back = await until(lambda: executors(cluster()[1]) >= had, 120)
    rec.extra["executors_back_s"] = round(drill.now() - rec.t_inject, 1) if back else None


async def web_fault(drill: Drill, rec: FaultRecord) -> None:
    webs = [n for n, (role, _) in drill.metrics.items() if role == "web"]
    latest = next((s["sockets"] for s in reversed(drill.samples()) if s.get("sockets")), {})
    sockets = {n: latest.get(n, 0.0) for n in webs}
    name = busiest_web(sockets)
    rec.target = f"{name}, {sockets[name]:.0f} WebSockets open ({sockets})"
    await drill.process_fault(rec, name, signal.SIGKILL, None)


async def redis_fault(drill: Drill, rec: FaultRecord) -> None:
    rec.target = "Redis, stopped (SIGTERM) and started again"
    await drill.process_fault(rec, "redis", signal.SIGTERM, 0, group=False)


async def postgres_fault(drill: Drill, rec: FaultRecord) -> None:
    rec.target = f"PostgreSQL, stopped in immediate mode (SIGQUIT) for {POSTGRES_DOWN_S:g} s"
    await drill.process_fault(
        rec, "postgres", signal.SIGQUIT, POSTGRES_DOWN_S, group=False,
        meanwhile=lambda: reads_while_database_down(drill, rec),
    )  # fmt: skip


#: Reads while PostgreSQL is down: the first this long after it stopped, then this often.
READ_CHECK_FIRST_S, READ_CHECK_EVERY_S = 3.0, 5.0


async def reads_while_database_down(drill: Drill, rec: FaultRecord) -> None:
    """The PostgreSQL fault's read check (issue 69): within the time the web keeps what
    the database answered (:data:`tracker.cache.outage.OUTAGE_SECONDS`) and the fault's
    hold, every probe customer reads their last order, as each probe does before it places
    one (each customer every few probes, so every web process has answered them within the
    last minutes): 200; a customer who never read (:func:`unread_customer`) reads their
    list: the 503 with ``Retry-After`` of anyone the web kept nothing for. What the web
    keeps is each process's own: a read that only another process answered before the
    outage is not "read lately" for this one."""
    from tracker.cache.outage import OUTAGE_SECONDS

    people, counts = drill.people, {"read_lately": Counter(), "never_read": Counter()}
    rec.extra["reads"] = counts
    until = rec.t_inject + min(POSTGRES_DOWN_S, OUTAGE_SECONDS) - 1.0
    at = rec.t_inject + READ_CHECK_FIRST_S
    async with drill.system.endpoint.client() as client:
        while at < until:
            await asyncio.sleep(max(0.0, at - drill.now()))
            for customer, last in list(people["last_orders"].items()):
                path = f"/api/v1/orders/{last}/"
                counts["read_lately"][await _status(client, path, customer)] += 1
            counts["never_read"][await _status(client, "/api/v1/orders/", people["unread"])] += 1
            at += READ_CHECK_EVERY_S
    drill.say(f"{rec.name}: reads while down: {dict(counts['read_lately'])} read lately, "
              f"{dict(counts['never_read'])} never read")  # fmt: skip


async def _status(client, path: str, token: str) -> str:  # noqa: ANN001 - an httpx client
    """The answer's code (with ``Retry-After`` when a 503 says when to retry), or the error."""
    try:
        response = await client.get(path, headers={"Authorization": f"Token {token}"})
    except Exception as exc:  # noqa: BLE001 - a refused read is a result
        return type(exc).__name__
    retry = (
        " Retry-After" if response.status_code == 503 and "Retry-After" in response.headers else ""
    )
    return f"{response.status_code}{retry}"


def unread_customer() -> str:
    """The token of a customer who reads nothing before the PostgreSQL fault."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.accounts.services import issue_token
    from tracker.customers.models import Customer

    user, _ = get_user_model().objects.get_or_create(username="drill-never-read")
    Customer.objects.get_or_create(user=user)
    key = issue_token(user).key
    connection.close()
    return key


#: The fault catalogue, in the default order.
FAULT_RUNNERS: dict[str, Callable] = {
    "kafka": kafka_fault,
    "pinot": pinot_fault,
    "spark": spark_fault,
    "web": web_fault,
    "redis": redis_fault,
    "postgres": postgres_fault,
}
FAULTS = tuple(FAULT_RUNNERS)


def stream_app_name() -> str:
    """The stream job's Spark application name (streaming.session.spark_session's default)."""
    import inspect

    from streaming.session import spark_session

    return inspect.signature(spark_session).parameters["app_name"].default


class HealthSampler(threading.Thread):
    """Every ``--sample-every`` seconds: the pipeline health endpoint, every ``/metrics``,
    Prometheus's alerts, the dead letters so far and the load average."""

    def __init__(self, drill: Drill) -> None:
        super().__init__(daemon=True, name="drill-sampler")
        self.drill = drill
        self.samples: list[dict] = []
        self.stopped = threading.Event()
        self._errors: dict[str, float] = {}
        self._consumer = None

    def run(self) -> None:
        every = self.drill.args.sample_every
        client = self.drill.system.endpoint.client(
            self.drill.people["operator"], timeout=3, sync=True
        )
        with client:
            while not self.stopped.is_set():
                started = time.monotonic()
                try:
                    self.samples.append(self.sample(client))
                except Exception as exc:  # noqa: BLE001 - a sample, not the run
                    self.samples.append({"t": self.drill.now(), "error": repr(exc)[:300]})
                self.stopped.wait(max(0.1, every - (time.monotonic() - started)))
        if self._consumer is not None:
            self._consumer.close()

    def sample(self, client) -> dict:  # noqa: ANN001 - an httpx.Client
        import httpx

        row: dict = {"t": self.drill.now(), "load1": round(os.getloadavg()[0], 2)}
        try:
            answer = client.get("/api/v1/operations/pipeline/").raise_for_status().json()
            row["pipeline"] = {
                "status": answer["status"],
                "stages": {
                    s["name"]: {"status": s["status"], "lag": s["lag"]} for s in answer["stages"]
                },
            }
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            row["pipeline"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        texts: dict[str, str | None] = {}
        for name, (_, port) in self.drill.metrics.items():
            try:
                texts[name] = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                texts[name] = None
        signals, self._errors = metric_signals(texts, self._errors)
        row["signals"] = sorted(signals)
        row["sockets"] = {
            name: sockets_open(text)
            for name, text in texts.items()
            if text is not None and self.drill.metrics[name][0] == "web"
        }
        row["alerts"] = self.alerts()
        row["dead_letters"] = self.dead_letters()
        return row

    def alerts(self) -> dict:
        import httpx

        try:
            answer = httpx.get(f"{self.drill.prometheus_url}/api/v1/alerts", timeout=2).json()
        except (httpx.HTTPError, ValueError) as exc:
            return {"error": repr(exc)[:200]}
        out: dict[str, list[str]] = {"firing": [], "pending": []}
        for alert in answer["data"]["alerts"]:
            labels = alert["labels"]
            name = labels["alertname"] + (f"({labels['stage']})" if "stage" in labels else "")
            out.setdefault(alert["state"], []).append(name)
        return {k: sorted(v) for k, v in out.items()}

    def dead_letters(self) -> int | None:
        """Dead letters written so far (the topic's end offsets)."""
        from contract.events import Topic, topic_name
        from runtime import kafka

        try:
            if self._consumer is None:
                self._consumer = kafka.consumer(**{"group.id": "bench-fault-drill"})
            ends = kafka.end_offsets(self._consumer, topic_name(Topic.DEAD_LETTERS), timeout=3)
            return sum(ends.values())
        except Exception:  # noqa: BLE001 - a broker down: not known now
            with contextlib.suppress(Exception):
                self._consumer.close()
            self._consumer = None
            return None


# ------------------------------------------------------------------ the figures


def summarise(
    rec: FaultRecord, drill_probes: list[dict], samples: list[dict], strip: list[dict], end: float
) -> dict:
    """One fault's figures between the fault and ``end``. Each observation counts where its
    own time falls (a read, a push, a drop, a latency when seen, an outcome when its probe
    ended), not where its probe began."""
    calm = rec.t_recovered if rec.t_recovered is not None else end
    window = probes_ended(drill_probes, rec.t_inject, end)
    inside = [s for s in samples if rec.t_inject <= s["t"] <= end]

    def since(t: float | None) -> float | None:
        return None if t is None or rec.t_inject is None else round(t - rec.t_inject, 1)

    verdicts = [p.get("socket") or {} for p in window]
    pushes = [t for p in drill_probes for t in p.get("pushed") or [] if rec.t_inject <= t < end]
    reference = rec.t_ready if rec.t_ready is not None else rec.t_repair
    if "leader_changed_s" in rec.extra:
        reference = rec.t_inject + rec.extra["leader_changed_s"]
    fast = None if reference is None else min((t for t in pushes if t >= reference), default=None)
    fresh = [  # when an enriched update showed a point posted since the fault
        t
        for p in drill_probes
        if p.get("update_s") is not None and p.get("accepted", {}).get("gps", -1) >= rec.t_inject
        if (t := p["accepted"]["gps"] + p["update_s"]) < end
    ]
    down_until = rec.t_repair if rec.t_repair is not None else end
    reads = Counter(
        f"{p['read']['status']} {p['read'].get('source')}"
        for p in probes_between(drill_probes, rec.t_inject, down_until)
        if p.get("read")
    )
    rejoined = [  # each probe's reconnects after a drop in the window, when it had any
        n for p in drill_probes if (n := sum(1 for t in reconnects(p) if rec.t_inject <= t < end))
    ]
    dead = [(s["t"], s["dead_letters"]) for s in samples if s.get("dead_letters") is not None]
    dead_before = next((n for t, n in reversed(dead) if t <= rec.t_inject), None)
    dead_after = next((n for t, n in reversed(dead) if t <= end), None)
    loads = [s["load1"] for s in inside if "load1" in s]
    return {
        "fault": rec.name,
        "target": rec.target,
        "error": rec.error,
        "repaired_s": since(rec.t_repair),
        "ready_s": since(rec.t_ready),
        "recovered_s": since(rec.t_recovered),
        "recovered_after_repair_s": None
        if rec.t_recovered is None or rec.t_repair is None
        else round(rec.t_recovered - rec.t_repair, 1),
        "window_s": since(end),
        "probes": {
            **failure_spans(window, since=rec.t_inject),
            "errors": Counter(
                f"{p['step']}: {p.get('error', '')[:80]}" for p in window if not p["ok"]
            ).most_common(5),
            "http": dict(
                Counter(
                    f"{e['step']} {e['status']}" + (" Retry-After" if e.get("retry_after") else "")
                    for p in window
                    for e in p.get("http_errors") or []
                )
            ),
        },
        "reads_while_down": dict(reads),
        "socket": {
            "missed": sum(len(v.get("missed") or []) for v in verdicts),
            "twice": sum(len(v.get("twice") or []) for v in verdicts),
            "out_of_order": sum(len(v.get("out_of_order") or []) for v in verdicts),
            "folded": sum(len(v.get("folded") or []) for v in verdicts),
            "reconnects": sum(rejoined),
            "probes_reconnected": len(rejoined),
        },
        "rest_repeats": sum(1 for p in window if p.get("rest_repeats")),
        "accept_to_socket": {
            "during": p99_of(drill_probes, "accept_to_socket", rec.t_inject, calm),
            "after": p99_of(drill_probes, "accept_to_socket", calm, end),
        },
        "accept_to_rest": {
            "during": p99_of(drill_probes, "accept_to_rest", rec.t_inject, calm),
            "after": p99_of(drill_probes, "accept_to_rest", calm, end),
        },
        "rest_503_longest_s": longest_refusal(polls_between(drill_probes, rec.t_inject, end)),
        "fast_resumed_s": None if fast is None or reference is None else round(fast - reference, 1),
        "enriched_resumed_s": since(min(fresh)) if fresh else None,
        "strip": shown_and_cleared(
            [
                (e["t"], [f"{k} {v}" for k, v in e["stages"].items() if v != "ok"])
                for e in strip
                if "stages" in e
            ],
            rec.t_inject,
            end,
        ),
        "metrics": shown_and_cleared(
            [(s["t"], s.get("signals") or []) for s in samples if "signals" in s], rec.t_inject, end
        ),
        "alert": shown_and_cleared(
            [
                (s["t"], s["alerts"].get("firing") or [])
                for s in samples
                if "firing" in (s.get("alerts") or {})
            ],
            rec.t_inject,
            end,
        ),
        "dead_letters_new": None
        if dead_before is None or dead_after is None
        else dead_after - dead_before,
        "restarts": rec.restarts,
        "load_avg": {
            "mean": round(sum(loads) / len(loads), 2) if loads else None,
            "max": max(loads, default=None),
        },
        "extra": rec.extra,
        "orders": rec.orders,
    }


def _at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def _detected(kind: str) -> Callable[[dict], bool | None]:
    def check(s: dict) -> bool:
        shown, cleared = s[kind]["shown_s"], s[kind]["cleared_s"]
        return shown is not None and shown <= 60 and cleared is not None

    return check


def _commands_503(s: dict) -> bool | None:
    refused = [k for k in s["probes"]["http"] if k.split()[1].startswith("5")]
    if not refused:
        return None
    return all(k.split()[1] == "503" and k.endswith("Retry-After") for k in refused)


def _reads_kept(s: dict) -> bool | None:
    reads = (s.get("extra") or {}).get("reads")
    if not reads or not reads["read_lately"]:
        return None
    return set(reads["read_lately"]) == {"200"} and set(reads["never_read"]) == {"503 Retry-After"}


def _reads_from_pinot(s: dict) -> bool | None:
    reads = s["reads_while_down"]
    return None if not reads else set(reads) == {"200 pinot"}


def _nothing_lost(s: dict) -> bool | None:
    return (
        None if s.get("counts_equal") is None else s["counts_equal"] and not s["socket"]["missed"]
    )


def _reconnected_without_loss(s: dict) -> bool | None:
    # None: no probe's socket was on the process that died.
    return s["socket"]["missed"] == 0 if s["socket"]["probes_reconnected"] else None


def _no_repeats(s: dict) -> bool:
    return not (s["socket"]["twice"] or s["socket"]["out_of_order"] or s["rest_repeats"])


def _recovered(s: dict) -> bool:
    return s["recovered_s"] is not None


#: The issue's targets: (fault, or None for every one; its words; its check on the fault's
#: figures: True met, False missed, None not measured).
TARGETS: tuple[tuple[str | None, str, Callable[[dict], bool | None]], ...] = (
    ("kafka", "no acknowledged event lost (counts equal, no status missed)", _nothing_lost),
    ("kafka", "no probe fails for more than 30 s", lambda s: s["probes"]["longest_failure_s"] <= 30),
    ("kafka", "fast socket updates resume within 10 s of the leader change",
     lambda s: _at_most(s["fast_resumed_s"], 10)),
    ("pinot", "REST reads answer from the replica: no 503 for longer than 10 s",
     lambda s: s["rest_503_longest_s"] <= 10),
    ("spark", "the job recovers without a manual step", _recovered),
    ("spark", "the enriched path resumes within 60 s", lambda s: _at_most(s["enriched_resumed_s"], 60)),
    ("web", "its clients reconnect and miss no status (?since=)", _reconnected_without_loss),
    ("redis", "sockets resubscribe within 10 s", lambda s: _at_most(s["fast_resumed_s"], 10)),
    ("redis", "no status missed", lambda s: s["socket"]["missed"] == 0),
    ("postgres", "commands answer 503 with Retry-After, never 500", _commands_503),
    ("postgres", "tracking reads keep answering from Pinot", _reads_from_pinot),
    ("postgres", "reads of users read lately: 200 for the kept minute; others: 503", _reads_kept),
    ("postgres", "the relay resumes without a manual step", _recovered),
    (None, "shows on the operations strip within 60 s and clears after recovery", _detected("strip")),
    (None, "shows as its alert within 60 s and clears after recovery", _detected("alert")),
    (None, "equal counts afterwards", lambda s: s.get("counts_equal")),
    (None, "no status twice or out of order on the sockets, no repeated REST row", _no_repeats),
    (None, "no new dead letters", lambda s: _at_most(s["dead_letters_new"], 0)),
)  # fmt: skip


def evaluate(summaries: list[dict]) -> list[dict]:
    """Every target of every fault that ran: met, missed or not measured."""
    out = []
    for s in summaries:
        for fault, text, check in TARGETS:
            if fault not in (None, s["fault"]):
                continue
            try:
                verdict = check(s)
            except (KeyError, TypeError, IndexError):
                verdict = None
            word = {True: "met", False: "MISSED", None: "not measured"}[verdict]
            out.append({"fault": s["fault"], "target": text, "verdict": word})
    return out


# ------------------------------------------------------------------ the run


OPTIONS = {
    "--multiple": harness.multiple(5),
    "--hold-minutes": (10.0, "fault-free phase first"),
    "--probe-every": (5.0, "seconds"),
    "--sample-every": (2.0, "seconds"),
    "--faults": (",".join(FAULTS), "which faults, in order (comma-separated)"),
    "--down-seconds": (60.0, "how long the Kafka node and the Pinot server stay down"),
    "--recover-minutes": (5.0, "longest wait for the pipeline to recover after a fault"),
    "--settle-minutes": (2.0, "after recovery, before the next fault (the 'after' figures)"),
    "--drain-minutes": 10.0,
    "--faults-anyway": (False, "go on with the faults when the load did not hold"),
    "--recompute": (Path, "start nothing: a stored result's figures derived again"),
}


def run(args: argparse.Namespace) -> dict | None:
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = set(args.faults) - set(FAULTS)
    if unknown:
        raise SystemExit(f"unknown faults: {', '.join(sorted(unknown))}")
    if args.recompute:
        print_recomputed(args.recompute)
        return None
    harness.stop_on_signals()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    var = harness.production_folder(cluster_files())
    print(f"fault drill: the cluster at {Load(args.multiple).describe()}, in {var}", flush=True)
    try:
        system = harness.start_production_run(args.multiple, files=cluster_files(), var=var)
    except BaseException:
        keep_logs(var, var.parent, harness.RESULTS / f"fault-drill-{args.multiple:g}x-{stamp}-logs")
        raise
    prometheus = drill = memory = None
    error = None
    drained: tuple[dict, dict] | None = None
    windows: dict[str, dict] = {}
    try:
        people = harness.probe_people(harness.wait_for_operator())
        people["unread"] = unread_customer()
        drill = Drill(system, args, people)
        prometheus = Prometheus.start(system.workdir, drill.prometheus_targets())
        drill.prometheus_url = prometheus.url
        memory = harness.MemorySampler(system.children)
        memory.start()
        drill.sampler = HealthSampler(drill)
        drill.sampler.start()
        asyncio.run(drill.run())
        system.run.app.stop_component("simulator")  # the load stops; the pipeline drains
        drill.say("draining")
        drained = harness.drain_and_count(args.drain_minutes * 60)
        for rec in drill.faults:
            if rec.orders and rec.orders[1] >= rec.orders[0]:
                windows[rec.name] = {
                    "postgres": harness.record_counts(rec.orders),
                    "pinot": harness.pinot_counts(rec.orders),
                }
    except BaseException as exc:  # noqa: BLE001 - the run is written as it stands
        error = "".join(traceback.format_exception(exc))[-4000:]
        print(f"!! {exc!r}", flush=True)
    finally:
        for sampler in (memory, drill.sampler if drill else None):
            if sampler is not None:
                sampler.stopped.set()
        if prometheus is not None:
            prometheus.stop()
        system.stop()
    return report(args, stamp, system, drill, memory, drained, windows, error)


def report(args, stamp, system, drill, memory, drained, windows, error) -> dict:  # noqa: ANN001, PLR0913
    """The tables and the result, with the logs beside it when anything failed."""
    probes = drill.probes if drill else []
    samples = drill.samples() if drill else []
    faults = drill.faults if drill else []
    summaries = fault_summaries(faults, probes, samples, drill.strip if drill else [], windows)
    targets = evaluate(summaries)
    loads = [s["load1"] for s in samples if "load1" in s]
    equal = None if drained is None else drained[0] == drained[1]
    # Probes failing during a fault are figures; a failed run is one that could not say
    # what the issue asks, or whose answer misses a target.
    failed = bool(
        error
        or not (drill and drill.hold.get("held"))
        or equal is False
        or any(t["verdict"] == "MISSED" for t in targets)
    )
    name = f"fault-drill-{args.multiple:g}x-{stamp}"
    logs = harness.RESULTS / f"{name}-logs"
    if failed:
        keep_logs(system.plan.var, system.workdir, logs)
    asked = Load(args.multiple).orders_per_minute
    result = {
        "label": f"{args.multiple:g}x",
        "failed": failed,
        "note": args.note,
        "system": {"files": [f.name for f in cluster_files()], "addresses": system.plan.addresses},
        "load": {
            "multiple": args.multiple,
            "orders_per_min_asked": asked,
            "orders_per_min_reached_in_hold": drill.hold.get("orders_per_min_reached")
            if drill
            else None,
            "load_avg_1m": {
                "mean": round(sum(loads) / len(loads), 2) if loads else None,
                "max": max(loads, default=None),
            },
        },
        "hold": drill.hold if drill else {},
        "faults": summaries,
        "targets": targets,
        "counts_after_drain": None
        if drained is None
        else {"postgres": drained[0], "pinot": drained[1], "equal": equal},
        # vars, not asdict: asdict rebuilds the reads' Counters from (key, count) pairs,
        # which counts the pairs themselves (tuple keys JSON cannot write).
        "fault_records": [vars(r) for r in faults],
        "probes": probes,
        "samples": samples,
        "strip": drill.strip if drill else [],
        "memory": memory.samples if memory else [],
        "restarts": {c.component.name: c.restarts for c in system.children},
        "error": error,
        "workdir": str(system.workdir),
        "logs": str(logs.relative_to(harness.ROOT)) if failed else None,
    }
    print_tables(result)
    return result


def fault_summaries(
    faults: list[FaultRecord],
    probes: list[dict],
    samples: list[dict],
    strip: list[dict],
    windows: dict[str, dict | None],
) -> list[dict]:
    """Every injected fault's :func:`summarise`, its window ending at its end, else the
    next fault or the last thing recorded; with both stores' counts of its orders."""
    last = max(
        [*(s["t"] for s in samples), *(p["end"] for p in probes), *(e["t"] for e in strip)],
        default=0.0,
    )
    last = math.nextafter(last, math.inf)  # a window holds what came before its end
    summaries = []
    for i, rec in enumerate(faults):
        if rec.t_inject is None:
            continue
        end = (
            rec.t_end
            or next((f.t_inject for f in faults[i + 1 :] if f.t_inject is not None), None)
            or max(rec.t_inject, last)
        )
        summary = summarise(rec, probes, samples, strip, end)
        counts = windows.get(rec.name)
        summary["counts"] = counts
        summary["counts_equal"] = None if counts is None else counts["postgres"] == counts["pinot"]
        summaries.append(summary)
    return summaries


def recompute(stored: dict) -> dict:
    """A stored result's fault figures and targets derived again from what it recorded;
    the counts and the fault-free phase stay as stored."""
    faults = [FaultRecord(**record) for record in stored["fault_records"]]
    windows = {s["fault"]: s.get("counts") for s in stored["faults"]}
    summaries = fault_summaries(
        faults, stored["probes"], stored["samples"], stored["strip"], windows
    )
    return {**stored, "faults": summaries, "targets": evaluate(summaries)}


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        return {k: v for key in value for k, v in _flat(value[key], f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def _brief(value: object, width: int = 70) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def changed_figures(old: dict, new: dict) -> list[tuple[str, str, str, str]]:
    """(fault, figure, old, new) for every figure and target verdict of a recomputed result
    (:func:`recompute`) that differs from the stored one."""
    rows = []
    for before, after in zip(old["faults"], new["faults"], strict=True):
        # As the JSON holds them (a tuple is a list there).
        was, now = _flat(before), _flat(json.loads(json.dumps(after, default=str)))
        rows += [
            (after["fault"], key, _brief(was.get(key)), _brief(now.get(key)))
            for key in sorted(was.keys() | now.keys())
            if was.get(key) != now.get(key)
        ]
    verdicts = {(t["fault"], t["target"]): t["verdict"] for t in old["targets"]}
    rows += [
        (t["fault"], t["target"], verdicts.get((t["fault"], t["target"]), "–"), t["verdict"])
        for t in new["targets"]
        if verdicts.get((t["fault"], t["target"])) != t["verdict"]
    ]
    return rows


def print_recomputed(path: Path) -> None:
    """``--recompute``: a stored result's tables by this script's rules, and what changed."""
    stored = json.loads(path.read_text())
    result = recompute(stored)
    print(f"recomputed from {path} (the run as it recorded; nothing started)")
    print_tables(result)
    harness.print_table(
        "Changed from the stored result",
        changed_figures(stored, result) or [("–", "nothing", "", "")],
        header=("fault", "figure or target", "stored", "recomputed"),
    )


def keep_logs(var: Path, workdir: Path, into: Path) -> None:
    """Every log of the run: the supervisors' (each process), Pinot's JVMs', Prometheus's,
    and the run's console."""
    into.mkdir(parents=True, exist_ok=True)
    for source, target in (
        (var / "app" / "logs", "processes"),
        (var / "app" / "pinot" / "logs", "pinot"),
        (workdir / "prometheus", "prometheus"),
    ):
        if source.is_dir():
            shutil.copytree(
                source, into / target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("data")
            )
    if (workdir / "run.log").exists():
        shutil.copy(workdir / "run.log", into / "run.log")


def _s(value: object) -> str:
    return "–" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _span(s: dict, key: str, a: str = "shown_s", b: str = "cleared_s") -> str:
    return f"{_s(s[key][a])} / {_s(s[key][b])}"


def _p99(s: dict, key: str) -> str:
    return f"{_s(s[key]['during']['p99_s'])} / {_s(s[key]['after']['p99_s'])}"


#: The per-fault tables: column -> its cell from a fault's summary.
FAULT_COLUMNS = {
    "fault": lambda s: s["fault"],
    "target": lambda s: s["target"][:60],
    "probes failed": lambda s: f"{s['probes']['failed']}/{s['probes']['total']}",
    "longest failure s": lambda s: _s(s["probes"]["longest_failure_s"]),
    "accepted->socket p99 s during/after": lambda s: _p99(s, "accept_to_socket"),
    "accepted->REST p99 s during/after": lambda s: _p99(s, "accept_to_rest"),
    "socket missed/twice/out of order": lambda s: "/".join(
        str(s["socket"][k]) for k in ("missed", "twice", "out_of_order")
    ),
    "reconnects": lambda s: _s(s["socket"]["reconnects"]),
    "load avg": lambda s: _s(s["load_avg"]["mean"]),
}
RECOVERY_COLUMNS = {
    "fault": lambda s: s["fault"],
    "repaired": lambda s: _s(s["repaired_s"]),
    "ready": lambda s: _s(s["ready_s"]),
    "every stage under threshold": lambda s: _s(s["recovered_s"]),
    "strip shown/cleared": lambda s: _span(s, "strip"),
    "/metrics shown/cleared": lambda s: _span(s, "metrics"),
    "alert shown/cleared": lambda s: _span(s, "alert"),
    "alerts": lambda s: ", ".join(s["alert"]["what"]) or "none",
    "new dead letters": lambda s: _s(s["dead_letters_new"]),
    "counts equal": lambda s: _s(s.get("counts_equal")),
    "restarts": lambda s: ", ".join(f"{k}+{v}" for k, v in s["restarts"].items()) or "none",
}


def print_tables(result: dict) -> None:
    load, hold = result["load"], result["hold"]
    held = (
        "held" if hold.get("held") else f"NOT held: {'; '.join(hold.get('why_not') or ['not run'])}"
    )
    harness.print_columns(
        f"Fault drill on the replicated cluster: {load['multiple']:g}x the book's peak "
        f"({load['orders_per_min_asked']:g} orders/min asked, "
        f"{_s(load['orders_per_min_reached_in_hold'])} reached without faults), load average "
        f"{_s(load['load_avg_1m']['mean'])} (max {_s(load['load_avg_1m']['max'])}); "
        f"{_s(hold.get('probes_passed'))}/{_s(hold.get('probes'))} probes passed in the "
        f"fault-free phase: {held}",
        result["faults"],
        FAULT_COLUMNS,
    )
    harness.print_columns(
        "Recovery and detection, seconds from the fault", result["faults"], RECOVERY_COLUMNS
    )
    harness.print_table(
        "Targets (issue 54)",
        [(t["fault"], t["target"], t["verdict"]) for t in result["targets"]],
        header=("fault", "target", "verdict"),
    )
    counts = result["counts_after_drain"]
    if counts:
        harness.print_table(
            "PostgreSQL against Pinot after draining",
            [
                (
                    k,
                    _s(counts["postgres"][k]),
                    _s(counts["pinot"].get(k)),
                    "yes" if counts["postgres"][k] == counts["pinot"].get(k) else "NO",
                )
                for k in counts["postgres"]
            ],
            header=("what", "PostgreSQL", "Pinot", "equal"),
        )
    if result["error"]:
        print("\n  the run failed:\n" + result["error"])

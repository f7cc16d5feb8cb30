"""The one harness every benchmark scenario runs on (``python -m bench NAME``).

A scenario (bench/scenarios/NAME.py) is a short module: a docstring (its ``--help``),
``OPTIONS`` (:func:`add_options`) and ``run(args) -> dict``. The harness parses the arguments,
starts what the scenario asks for through the one launcher (:func:`system`,
:func:`production`: :class:`localrun.launch.System`), samples the machine's load average
all along, prints each table with the load beside its figures, and writes the result with
the machine, the commit and the arguments to ``bench/results/NAME-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import json
import logging
import math
import multiprocessing
import os
import platform
import random
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contract.load import REFERENCE_TRAFFIC, Load
from localrun.launch import System
from localrun.ports import free_port

#: The benchmarks run the development settings, as ``make run`` does (debug is off unless
#: asked for); the processes they start inherit it, and a production topology sets its own.
os.environ.setdefault("DJANGO_DEBUG", "true")

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent
SCENARIOS = sorted(p.stem for p in (ROOT / "bench" / "scenarios").glob("[a-z]*.py"))
#: Writes raised (a benchmark places and moves orders faster than people do); reads are
#: not: benchmarks spread them over users (:func:`readers_for`).
BENCH_ENV = {
    "LOG_LEVEL": "WARNING",
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "KAFKA_TOPIC_PREFIX": "",
    "API_THROTTLE_ORDERS": "100000/min",
    "API_THROTTLE_WRITES": "100000/min",
    "API_THROTTLE_LOCATIONS": "1000000/min",
}


# ------------------------------------------------------------------ the machine


def machine() -> dict:
    """Cores, memory, commit and load, recorded with every figure."""
    git = ["git", "rev-parse", "--short", "HEAD"]
    commit = subprocess.run(git, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 1024**3, 1),
        "python": platform.python_version(),
        "commit": commit or "unknown",
        "date": time.strftime("%Y-%m-%d"),
        "load_avg_1m": os.getloadavg()[0],
    }


class LoadSampler(threading.Thread):
    """The machine's 1-minute load average every ``every`` seconds of a run: what else ran
    beside the figures (two cores are shared with whatever else is on the machine)."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.every, self.samples, self.done = every, [], threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while True:
            self.samples.append((round(time.monotonic() - self.t0), os.getloadavg()[0]))
            if self.done.wait(self.every):
                return

    def summary(self) -> dict:
        loads = [load for _, load in self.samples]
        return {"min": min(loads), "max": max(loads), "every_s": self.every, "series": self.samples}


# ------------------------------------------------------------------ starting the system


def start(
    names: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    seed: bool = False,
    prepare: Callable[[], object] | None = None,
) -> System:
    """The named components (all by default) as ``make run`` runs them, on a fresh folder
    and free ports, this process's Django on the same stores (migrated; with ``seed``, the
    demo world; then ``prepare()``). The caller stops it."""
    import django
    from django.core.management import call_command

    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    out = (workdir / "console.log").open("w")  # noqa: SIM115 - the run's, closed at exit
    launched = System(names, workdir=workdir, env={**BENCH_ENV, **(env or {})}, out=out)
    os.environ.update(launched.env)
    django.setup()
    call_command("migrate", verbosity=0)
    if seed:
        call_command("simulate", seed_only=True, seed=42)
    if prepare is not None:
        prepare()
    return launched.start()


@contextlib.contextmanager
def system(
    names: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    seed: bool = False,
    prepare: Callable[[], object] | None = None,
) -> Iterator[System]:
    """:func:`start` for the duration; its folder is removed after."""
    launched = start(names, env, seed, prepare)
    try:
        yield launched
    finally:
        launched.stop()
        shutil.rmtree(launched.workdir or "", ignore_errors=True)


def start_full_system(multiple: float, read_rate: float = 0) -> System:
    """Every component, the simulator at ``multiple`` x the book's peak
    (:func:`simulator_env`; the caller stops it). ``read_rate``: REST reads a second to come, for which the world gets twice the
    customers :func:`readers_for` says."""

    def more_customers() -> None:
        from tracker.customers.models import Customer

        if read_rate and (more := 2 * readers_for(read_rate) - Customer.objects.count()) > 0:
            bench_customers(more, "bench-customer")

    return start(env=simulator_env(multiple), seed=True, prepare=more_customers)


@dataclass
class Pinot:
    """A launched Pinot's costs and start-up: its JVMs are the ``pinot`` launcher's children."""

    system: System

    def cpu_s(self) -> float:
        """CPU seconds of the JVMs so far (the launcher's readiness loop, not)."""
        stats, pid = _proc_stats(), self.system.pid("pinot")
        return _cpu_s(stats, [p for p in _tree(pid, stats) if p != pid])

    def rss_mb(self) -> float:
        return process_tree_rss(self.system.pid("pinot"))

    @property
    def ready_s(self) -> float | None:
        """Seconds from its launch to ``pinot: ready`` (tables loaded and answering)."""
        log = Path(self.system.env["ORDERTRACK_VAR_DIR"]) / "logs" / "pinot.log"
        found = re.search(r"pinot: ready \(([\d.]+) s", log.read_text(errors="replace"))
        return float(found[1]) if found else None


# ------------------------------------------------------------------ results


#: Set by SIGTERM/SIGINT once a long scenario calls :func:`stop_on_signals`: it stops what
#: it does next and writes the run as it stands, so a run stopped early leaves its evidence.
STOP = threading.Event()


def stop_on_signals() -> None:
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: STOP.set())


def in_fresh_process(function: Callable, *args: object) -> object:
    """``function(*args)`` in a new interpreter: Django's settings and a started system
    belong to one process, so a scenario that measures several systems starts each there."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(function, *args).result()


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True, default=str))
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m bench NAME [options]``: run one scenario and write its result (named
    ``NAME[-label]-<time>.json``, the label a scenario may return: ``10x``, ``prod``...)."""
    parser = argparse.ArgumentParser(prog="python -m bench", add_help=False)
    parser.add_argument("scenario", nargs="?", choices=SCENARIOS)
    known, rest = parser.parse_known_args(argv)
    if known.scenario is None:  # the list, each with its docstring's first line
        print("usage: python -m bench NAME [options]   (python -m bench NAME --help)\n")
        for name in SCENARIOS:
            doc = importlib.import_module(f"bench.scenarios.{name}").__doc__ or ""
            print(f"  {name:12} {doc.strip().splitlines()[0]}")
        return 0
    module = importlib.import_module(f"bench.scenarios.{known.scenario}")
    summary, _, more = (module.__doc__ or "").strip().partition("\n\n")
    sub = argparse.ArgumentParser(
        prog=f"python -m bench {known.scenario}", description=summary, epilog=more or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add_options(sub, {"--note": ("", "how it was run, stored with the result"), **module.OPTIONS})
    if hasattr(module, "add_arguments"):  # what a table cannot say (repeated, a path)
        module.add_arguments(sub)
    args = sub.parse_args(rest)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # else a line per request
    load = LoadSampler()
    load.start()
    started = machine()
    try:
        result = module.run(args)
    finally:
        load.done.set()
    if result is None:  # an analysis of stored results: nothing new to write
        return 0
    result = {"machine": started, "load_avg_1m": load.summary(), "params": vars(args), **result}
    name = "-".join([known.scenario.replace("_", "-"), *filter(None, [result.get("label")])])
    print("  written to", write_result(name, result))
    return 1 if result.get("failed") else 0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def _proc_stats() -> dict[int, list[str]]:
    """Every process's ``/proc/PID/stat`` fields after its name, in one pass (a thread's
    ``children`` file is unreliable while it runs); one that exits meanwhile is left out."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    return stats


def _tree(pid: int, stats: dict[int, list[str]]) -> list[int]:
    """``pid`` and its live descendants (a component's JVM, PostgreSQL's backends)."""
    children: dict[int, list[int]] = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)
    tree, todo = [], [pid] if pid in stats else []
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return tree


def _cpu_s(stats: dict[int, list[str]], pids: list[int]) -> float:
    """User and system CPU seconds of ``pids``, their reaped children's included."""
    return sum(int(f) for p in pids for f in stats[p][11:15]) / os.sysconf("SC_CLK_TCK")


def process_tree_rss(pid: int) -> float:
    """RSS of a process and its descendants, MiB."""
    stats = _proc_stats()
    return sum(int(stats[p][21]) for p in _tree(pid, stats)) * os.sysconf("SC_PAGE_SIZE") / 2**20


def process_tree_cpu(pid: int) -> float:
    """CPU seconds a process and its descendants used so far, reaped children included."""
    stats = _proc_stats()
    return _cpu_s(stats, _tree(pid, stats))


def pids_of(children: Iterable) -> dict[str, int]:
    """Each running component's pid, by name (``System.children``, a production run's)."""
    return {c.component.name: c.process.pid for c in children if c.process}


def cpu_of(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process tree (:func:`process_tree_cpu`)."""
    return {name: process_tree_cpu(pid) for name, pid in pids.items()}


def cores(before: Mapping[str, float], after: Mapping[str, float], seconds: float) -> dict:
    """Cores each process used between two :func:`cpu_of` reads ``seconds`` apart."""
    return {name: (after[name] - before.get(name, 0.0)) / seconds for name in after}


def longest_growth_s(series: list[float | None], step_s: float = 10) -> float:
    """The longest run of samples, each greater than the one before, in seconds: a lag
    that keeps growing shows as a long run (issue 29's "no stall": never over 60 s)."""
    longest = run = 0.0
    for before, after in zip(series, series[1:], strict=False):
        run = run + step_s if before is not None and after is not None and after > before else 0
        longest = max(longest, run)
    return longest


def histogram_buckets(url: str, name: str, labels: dict[str, str]) -> dict[float, float]:
    """One histogram series of a ``/metrics`` exposition: upper bound -> cumulative count
    (empty while the series has no sample)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url, timeout=10).raise_for_status().text
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_bucket" and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0) + sample.value  # summed over workers
    return buckets


def histogram_quantiles(
    before: dict[float, float], after: dict[float, float], quantiles=(0.5, 0.99)
) -> dict:
    """The samples observed between two :func:`histogram_buckets` reads: their count and,
    per quantile, the upper bound of the bucket that holds it (a bound, not a value)."""
    counts = {bound: after[bound] - before.get(bound, 0) for bound in sorted(after)}
    total = counts.get(float("inf"), 0)
    out: dict = {"n": total}
    for q in quantiles:
        bound = next((b for b, c in counts.items() if total and c >= q * total), None)
        out[f"p{q * 100:g}_at_most_s"] = bound
    return out


def operator_tokens(sockets: int, prefix: str = "bench-ops") -> list[str]:
    """Tokens of enough operators for ``sockets`` WebSockets at ``WS_MAX_SOCKETS_PER_USER``
    each (spread as real clients are, not by raising the cap): see :func:`token_of_socket`."""
    from django.conf import settings

    return operators(math.ceil(sockets / settings.WS_MAX_SOCKETS_PER_USER), prefix)


def operators(count: int, prefix: str = "bench-ops") -> list[str]:
    """API tokens of ``count`` operators of the benchmark's own (at least one)."""
    from django.contrib.auth import get_user_model

    from tracker.accounts.services import issue_token

    users = get_user_model().objects
    keys = []
    for n in range(max(1, count)):
        user, _ = users.get_or_create(username=f"{prefix}{n + 1}", defaults={"is_staff": True})
        keys.append(issue_token(user).key)
    return keys


# --- the REST read budget (api.throttles.ReadRateThrottle) --------------------------------
# Benchmarks read as real clients do, each user within its budget, and spread their reads
# over as many users as that takes, rather than raise the budget.

#: The share of a user's budget a benchmark plans to spend: the rest is room for warm-up
#: reads, ETag fetches and the seam between two rounds.
READ_BUDGET_SHARE = 0.8


def read_budget(staff: bool = False) -> tuple[int, int]:
    """(reads, seconds) one user may send (``API_THROTTLE_READS[_STAFF]``)."""
    from django.conf import settings

    from tracker.accounts.rates import parse_rate

    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    return parse_rate(rates["reads_staff" if staff else "reads"])


def readers_for(rate: float, staff: bool = False) -> int:
    """How many users ``rate`` reads a second take, each spending at most
    :data:`READ_BUDGET_SHARE` of its budget when the reads are :func:`dealt` over them."""
    count, period = read_budget(staff)
    return max(1, math.ceil(rate * period / (count * READ_BUDGET_SHARE)))


def budget_text(staff: bool = False) -> str:
    """The budget as a reader of a benchmark's output wants it: ``"120 reads/60 s"``."""
    count, period = read_budget(staff)
    name = "API_THROTTLE_READS_STAFF" if staff else "API_THROTTLE_READS"
    return f"{name}={count} reads/{period} s"


def dealt(users: list, n: int, seed: int) -> list:
    """``n`` turns over ``users``, round robin in a shuffled order: each user's reads come
    evenly spaced, where random picks would bunch some over their budget."""
    order = list(users)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(n)]


def bench_customers(count: int, prefix: str) -> list[tuple[object, str]]:
    """``count`` customers of the benchmark's own with an address and a token: (Customer,
    key). In bulk and without passwords (hashing is slow by design); earlier ones are kept."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from tracker.accounts.models import ApiToken
    from tracker.accounts.security import sealed_key
    from tracker.customers.models import Address, Customer
    from tracker.sharing.tokens import digest
    from tracker.simulator.seed import CITY_CENTER, CITY_SPREAD_DEG

    user_model = get_user_model()
    names = [f"{prefix}{n + 1}" for n in range(count)]
    have = set(user_model.objects.filter(username__in=names).values_list("username", flat=True))
    user_model.objects.bulk_create(
        [user_model(username=n, password=make_password(None)) for n in names if n not in have],
        batch_size=500,
    )
    users = user_model.objects.filter(username__in=names)
    Customer.objects.bulk_create(
        [Customer(user=u) for u in users.filter(customer__isnull=True)], batch_size=500
    )
    mine = Customer.objects.filter(user__in=users)
    spot = random.Random(prefix)  # spread as the demo world's customers live
    Address.objects.bulk_create(
        [
            Address(
                customer=c, line1=f"{c.pk} MG Road", is_default=True,
                lat=round(CITY_CENTER[0] + spot.uniform(-1, 1) * CITY_SPREAD_DEG, 6),
                lon=round(CITY_CENTER[1] + spot.uniform(-1, 1) * CITY_SPREAD_DEG, 6),
            )
            for c in mine.filter(addresses__isnull=True)
        ],
        batch_size=500,
    )  # fmt: skip
    # A fresh token each (only digests are kept, so an earlier run's keys are gone), made
    # in bulk: one sign-in per customer would cost a password check each.
    ApiToken.objects.filter(user__in=users).delete()
    keys = {u.username: sealed_key(u) for u in users}
    ApiToken.objects.bulk_create(
        [ApiToken(user=u, digest=digest(keys[u.username])) for u in users], batch_size=500
    )
    customers = {c.user.username: c for c in mine.select_related("user")}
    return [(customers[n], keys[n]) for n in names]


def customer_orders(customers: int, timeout: float = 900, newest: int = 5000) -> list[tuple]:
    """(order id, its customer's token) for the ``newest`` orders of the last ``customers``
    customers who ordered, once the simulator has ordered for that many (``timeout`` s)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.accounts.services import issue_token
    from tracker.orders.models import Order

    deadline = time.monotonic() + timeout
    while True:
        rows = list(Order.objects.order_by("-id").values_list("id", "customer__user_id")[:newest])
        owners = list(dict.fromkeys(user for _, user in rows))[:customers]
        connection.close()  # a long wait must not hold a connection (PostgreSQL's are few)
        if len(owners) >= customers:
            break
        if time.monotonic() > deadline:
            raise SystemExit(
                f"the simulator's orders cover {len(owners)} customers after {timeout:g} s; "
                f"{customers} are needed to read within {budget_text()}"
            )
        print(f"waiting for orders of {customers} customers ({len(owners)} so far)", flush=True)
        time.sleep(10)
    users = get_user_model().objects.in_bulk(owners)
    keys = {user: issue_token(users[user]).key for user in owners}
    return [(order_id, keys[user]) for order_id, user in rows if user in keys]


def token_of_socket(tokens: list[str], index: int) -> str:
    """The token socket ``index`` signs in with (see :func:`operator_tokens`)."""
    from django.conf import settings

    return tokens[index // settings.WS_MAX_SOCKETS_PER_USER]


#: The tables the stream job's topics fill, each consuming the topic of its name.
ENRICHED_TABLES = ("orders_enriched", "delivery_statuses", "order_items_enriched")


def pinot_rows(table: str) -> int:
    """Every row ``table`` holds (``skipUpsert``: each version, not the latest per key);
    -1 while Pinot does not answer."""
    from tracker.tracking.exceptions import TrackingUnavailable
    from tracker.tracking.selectors.store import query

    try:
        rows = query(f"SELECT COUNT(*) AS n FROM {table} OPTION(skipUpsert=true)")
    except TrackingUnavailable:
        return -1
    return int(rows[0]["n"]) if rows else 0  # 0.11: an empty table may answer no row


def offsets(topics: Iterable, start: bool = False) -> dict:
    """Where each topic (a ``Topic`` or a name) ends now, or ``start``s: {topic: {partition:
    offset}}, through a consumer of its own."""
    from contract.events import Topic, topic_name
    from runtime import kafka

    read = kafka.start_offsets if start else kafka.end_offsets
    consumer = kafka.consumer()
    try:
        return {t: read(consumer, topic_name(t) if isinstance(t, Topic) else t) for t in topics}
    finally:
        consumer.close()


def topic_records(table: str) -> int:
    """Records in the topic ``table`` consumes (the producers are idempotent, never
    transactional, so offsets count records)."""
    from contract.events import Topic

    topic = Topic(table)
    ends, starts = offsets([topic])[topic], offsets([topic], start=True)[topic]
    return sum(ends[p] - starts[p] for p in ends)


def wait_pinot_caught_up(timeout: float = 300, tables: tuple[str, ...] = ENRICHED_TABLES) -> float:
    """Until Pinot holds as many rows as each table's topic has records; the seconds waited."""
    started = time.monotonic()
    wanted = {table: topic_records(table) for table in tables}
    for table, count in wanted.items():
        while (held := pinot_rows(table)) < count:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"Pinot holds {held} of {count} records of {table}")
            time.sleep(0.5)
    return time.monotonic() - started


def disk_mb(path: Path) -> float:
    """Disk taken under ``path`` (Kafka's log segments, a checkpoint), in MiB: blocks
    allocated, not apparent sizes, which Kafka's preallocated sparse index files inflate."""
    total = 0
    for entry in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a segment deleted meanwhile
            if entry.is_file():
                total += entry.stat().st_blocks * 512
    return round(total / 1_048_576, 1)


def multiple(default: float = 1) -> tuple[float, str]:
    """The ``--multiple`` option: the simulator's load, as :func:`start_full_system` takes it."""
    return float(default), f"simulator load, x the book's peak: 1x is {Load(1).describe()[3:]}"


def simulator_env(multiple: float) -> dict[str, str]:
    """The simulator's variables for ``multiple`` x the book's peak, in every topology: the
    orders a minute, ``make run``'s kitchen pace, and the traffic pinned at the one that
    gives the reference points an order (contract/load.py), so a level carries the same
    GPS points a second at any hour of the day."""
    return {
        "SIMULATOR_RATE": str(Load(multiple).orders_per_minute),
        "SIMULATOR_PACE": "4",
        "SIMULATOR_TRAFFIC": str(REFERENCE_TRAFFIC),
    }


def add_options(parser: argparse.ArgumentParser, options: Mapping[str, object]) -> None:
    """A scenario's ``OPTIONS``: ``"--name": default`` or ``(default, help)``. The type is
    the default's; ``False`` makes a switch; a type instead of a default: no default."""
    for flag, spec in options.items():
        default, text = spec if isinstance(spec, tuple) else (spec, None)
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", help=text)
        elif isinstance(default, type):
            parser.add_argument(flag, type=default, help=text)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=text)


def print_table(
    title: str, rows: list[tuple[str, ...]], header: tuple[str, ...] | None = None
) -> None:
    """A plain aligned table on stdout, the machine's load average in its title (every
    figure is read beside what else the two cores ran)."""
    if not rows:
        return
    table = [header, *rows] if header else rows
    title += f"  (load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())})"
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]))]
    print(f"\n{title}")
    for index, row in enumerate(table):
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
        if header and index == 0:
            print("  " + "  ".join("-" * w for w in widths))


def print_columns(title: str, items: list, columns: Mapping[str, Callable]) -> None:
    """:func:`print_table` of ``items``, one row each: column name -> its cell from an item."""
    print_table(title, [tuple(cell(i) for cell in columns.values()) for i in items], tuple(columns))


class ConnectionClosedIdle(ConnectionError):
    """A kept-alive connection the server had closed: the request was not processed."""


class Connection:
    """One HTTP/1.1 keep-alive connection, spoken by hand: the generator must cost far
    less than the server it measures (an httpx request costs about as much as the
    handler it calls)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(*await asyncio.open_connection(host, port))

    async def get(
        self, host: str, path: str, token: str, etag: str | None = None, extra: str = ""
    ) -> tuple[int, bool, bytes]:
        """Status, whether the server keeps the connection open, and the body.
        ``extra``: more header lines, each ending in CRLF."""
        condition = f"If-None-Match: {etag}\r\n" if etag else ""
        self.writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Token {token}\r\n"
            f"{condition}{extra}\r\n".encode()
        )
        status_line = await self.reader.readline()
        if not status_line:  # closed by the server before answering (its keep-alive timeout)
            raise ConnectionClosedIdle
        status = int(status_line.split(b" ", 2)[1])
        length, chunked, keep = 0, False, True
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value
            elif name == b"connection":
                keep = value != b"close"
        if not chunked:
            return status, keep, await self.reader.readexactly(length)
        parts = []
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            parts.append((await self.reader.readexactly(size + 2))[:-2])
        await self.reader.readline()
        return status, keep, b"".join(parts)

    def close(self) -> None:
        self.writer.close()


# ------------------------------------------------------------------ the production-like run


@dataclass
class Endpoint:
    """Where a benchmark reaches the public API as an outside client: the address, the CA
    of the proxy's TLS, and what the proxy would add when there is none."""

    url: str
    ca_file: Path | None = None
    headers: dict[str, str] = field(default_factory=dict)
    origin: str | None = None

    @functools.cached_property
    def tls(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https:"):
            return None
        return ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)

    def client(self, token: str | None = None, timeout: float = 30, sync: bool = False):  # noqa: ANN201 - an httpx client
        """An HTTP client of the API (``httpx.AsyncClient``, or ``httpx.Client`` with
        ``sync``), signed in with ``token`` when given."""
        import httpx

        auth = {"Authorization": f"Token {token}"} if token else {}
        return (httpx.Client if sync else httpx.AsyncClient)(
            base_url=self.url,
            headers={**self.headers, **auth},
            verify=self.tls or True,
            timeout=timeout,
        )

    def ws_url(self, path: str) -> str:
        """``http(s)://host`` + ``path`` as ``ws(s)://host`` + ``path``."""
        return "ws" + self.url.removeprefix("http") + path

    def ws_options(self, token: str) -> dict:
        """``websockets.connect``'s arguments for a socket signed in with ``token``."""
        return {
            "additional_headers": {**self.headers, "Authorization": f"Token {token}"},
            "origin": self.origin,
            "ssl": self.tls,
        }


@dataclass
class ProductionSystem:
    """A started ``make run-prod`` (localrun/compose/) and how a benchmark reaches it."""

    run: object  # localrun.compose.ProductionRun: its supervisors, run.infra and run.app
    plan: object  # localrun.compose.plan.Plan: every process's command line and addresses
    endpoint: Endpoint
    #: The run's folder (its ``var``, ``run.log`` and, under ``<var>/app``, the logs).
    workdir: Path

    @property
    def children(self) -> list:
        return [*self.run.infra.children, *self.run.app.children]

    def child(self, name: str):  # noqa: ANN201 - an localrun.supervisor.Child
        return next(c for c in self.children if c.component.name == name)

    def stop(self) -> None:
        self.run.stop()


def production_folder(files: list[Path] | None = None) -> Path:
    """``var/bench-prod-<time>/prod[-cluster]`` (under ``var/``: the image's user must reach it)."""
    from localrun.compose.file import COMPOSE_FILE
    from localrun.compose.plan import default_var
    from runtime.conf import BASE_DIR

    stamp = time.strftime("%Y%m%d-%H%M%S")
    return BASE_DIR / "var" / f"bench-prod-{stamp}" / default_var(files or [COMPOSE_FILE]).name


def start_production_run(
    multiple: float, files: list[Path] | None = None, var: Path | None = None
) -> ProductionSystem:
    """``make run-prod``'s processes (``files`` merged as ``COMPOSE_FILE``), the simulator at
    ``multiple`` x the book's peak, in ``var``; this process's Django on its stores."""
    from localrun import compose as prod
    from localrun.compose.file import COMPOSE_FILE

    files = files or [COMPOSE_FILE]
    var = var or production_folder(files)
    var.parent.mkdir(parents=True)
    overrides = {**simulator_env(multiple), "LOG_LEVEL": "WARNING"}
    p = prod.plan(
        var=var, ports=prod.Ports(web=free_port()), overrides=overrides, demo=True, files=files
    )
    run = prod.ProductionRun(p, out=open(var.parent / "run.log", "w"))  # noqa: SIM115
    try:
        run.start()
    except BaseException:
        run.stop()  # what did start would outlive the benchmark
        raise
    env = p.one_shots["migrate"][1]
    os.environ.update(
        {
            **{k: v for k, v in env.items() if k.startswith("KAFKA_")},  # topics' offsets
            "DATABASE_URL": env["DATABASE_URL"],
            "PINOT_BROKER_URL": env["PINOT_BROKER_URL"],
            "PINOT_CONTROLLER_URL": env["PINOT_CONTROLLER_URL"],
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": env["DJANGO_SECRET_KEY"],
            "DJANGO_DEBUG": "true",  # this process only reads; it serves nothing
        }
    )
    import django

    django.setup()
    if p.proxied:
        endpoint = Endpoint(p.public_url, ca_file=p.ca_file)
    else:
        endpoint = Endpoint(
            f"http://localhost:{p.ports.web}",
            headers={"X-Forwarded-Proto": "https"},
            origin="https://localhost",
        )
    return ProductionSystem(run, p, endpoint, var.parent)


def wait_for_operator(timeout: float = 300):  # noqa: ANN201 - a User
    """The simulator seeds the demo users when it starts."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.simulator.seed import OPERATOR_USERNAME

    deadline = time.monotonic() + timeout
    while True:
        user = get_user_model().objects.filter(username=OPERATOR_USERNAME).first()
        if user is not None:
            return user
        if time.monotonic() > deadline:
            raise SystemExit("the simulator did not seed the demo data")
        connection.close()
        time.sleep(1)


class MemorySampler(threading.Thread):
    """Every ``every`` s: each process's RSS and CPU so far, the orders placed and those
    not yet in Pinot, and the source topics' records (the load reached)."""

    def __init__(self, children: list, every: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.children, self.every = children, every
        self.samples: list[dict] = []
        self.stopped = threading.Event()
        self.t0 = time.monotonic()
        self._consumer = None

    def sample(self) -> None:
        from django.db import connection

        from tracker.orders.models import Order
        from tracker.tracking.selectors import query

        row: dict = {"t_s": round(time.monotonic() - self.t0)}
        # The current process of each component: a restarted one has a new pid.
        row["rss_mb"] = {
            c.component.name: round(process_tree_rss(c.process.pid)) if c.process else 0
            for c in self.children
        }
        row["cpu_s"] = {
            c.component.name: round(process_tree_cpu(c.process.pid), 1) if c.process else 0
            for c in self.children
        }
        try:
            row["records"] = self.source_records()
        except Exception as exc:  # noqa: BLE001 - a sample, not the run
            row["records"] = f"error: {exc}"[:200]
        try:
            row["orders"] = Order.objects.count()
            in_pinot = query("SELECT COUNT(*) AS n FROM orders_enriched")[0]["n"]
            row["orders_not_in_pinot"] = row["orders"] - int(in_pinot)
        except Exception as exc:  # noqa: BLE001 - a sample, not the run
            row["orders_not_in_pinot"] = f"error: {exc}"[:200]
        connection.close()
        self.samples.append(row)

    def source_records(self) -> dict[str, int]:
        """Records written so far to each source topic (orders, status changes, GPS points):
        the load each window of the run carried."""
        from contract.events import SOURCE_TOPICS, topic_name
        from runtime.kafka import consumer, end_offsets

        if self._consumer is None:
            self._consumer = consumer(**{"group.id": "bench-soak-sampler"})
        return {
            str(t): sum(end_offsets(self._consumer, topic_name(t)).values()) for t in SOURCE_TOPICS
        }

    def run(self) -> None:
        try:
            while True:
                self.sample()
                if self.stopped.wait(self.every):
                    return
        finally:
            if self._consumer is not None:
                self._consumer.close()


def record_counts(orders: tuple[int, int] | None = None) -> dict[str, int]:
    """What the system of record holds: orders, status changes, items, delivered orders
    (of the orders whose ids are within ``orders``, both ends included, when given)."""
    from django.db import connection

    from contract.events import OrderStatus
    from tracker.orders.models import Order, OrderItem, OrderStatusChange

    mine = {} if orders is None else {"order__id__range": orders}
    counts = {
        "orders": Order.objects.filter(**({} if orders is None else {"id__range": orders})).count(),
        "status changes": OrderStatusChange.objects.filter(**mine).count(),
        "order items": OrderItem.objects.filter(**mine).count(),
        "delivered orders": Order.objects.filter(
            status=OrderStatus.DELIVERED, **({} if orders is None else {"id__range": orders})
        ).count(),
    }
    connection.close()
    return counts


def pinot_counts(orders: tuple[int, int] | None = None) -> dict[str, int]:
    """The same counts from Pinot: orders and their status times in ``orders_enriched``
    (one row per order once upserted), item lines in ``order_items_enriched``."""
    from contract.events import OrderStatus, status_time_field
    from tracker.tracking.selectors import query

    where = "" if orders is None else f" WHERE order_id BETWEEN {orders[0]:d} AND {orders[1]:d}"
    also = " AND" if orders is not None else " WHERE"
    columns = [status_time_field(status) for status in OrderStatus]
    times = query(
        "SELECT "
        + ", ".join(f"COUNT(*) FILTER (WHERE {c} > 0) AS {c}" for c in columns)
        + f" FROM orders_enriched{where}"
    )[0]
    return {
        "orders": query(f"SELECT COUNT(*) AS n FROM orders_enriched{where}")[0]["n"],
        "status changes": sum(int(times[c]) for c in columns),
        "order items": query(f"SELECT COUNT(*) AS n FROM order_items_enriched{where}")[0]["n"],
        "delivered orders": query(
            f"SELECT COUNT(*) AS n FROM orders_enriched{where}{also} status = 'DELIVERED'"
        )[0]["n"],
    }


def drain_and_count(timeout: float = 300) -> tuple[dict, dict]:
    """Wait until Pinot holds what the system of record holds (or time out); return both."""
    deadline = time.monotonic() + timeout
    while True:
        want, have = record_counts(), pinot_counts()
        if want == have or time.monotonic() > deadline:
            return want, have
        time.sleep(2)


# ------------------------------------------------------------------ the black-box probe

#: How long a probe waits for each thing it expects (a socket message, a REST answer).
PROBE_TIMEOUT = 60.0
#: The web client's reconnect schedule (frontend/static/frontend/js/live.js): 0.5 s
#: doubling up to 30 s, with "equal jitter", back to the start once a socket is live.
BACKOFF_START_S, BACKOFF_MAX_S = 0.5, 30.0
#: Close codes after which the client gives up (live.js's FINAL_CODES).
FINAL_CLOSE_CODES = frozenset({4400, 4401, 4403, 4404})


def reconnect_delay(attempt: int, rng: random.Random) -> float:
    """live.js's wait before reconnect number ``attempt`` (0 for the first)."""
    base = min(BACKOFF_MAX_S, BACKOFF_START_S * 2**attempt)
    return base / 2 + rng.random() * base / 2


def _point(position: dict | None) -> tuple[float, float] | None:
    return None if not position else (round(position["lat"], 6), round(position["lon"], 6))


def _shown_statuses(order: dict) -> list[str]:
    """The statuses a snapshot's order shows as reached (its timeline's done and current)."""
    return [
        s["status"] for s in order.get("timeline") or [] if s.get("state") in ("done", "current")
    ]


class ProbeFailed(Exception):
    """A step of the probe did not get what it expected (the message says what it got)."""


class OrderFollower:
    """One order's WebSocket kept as the web client keeps it (live.js's back-off,
    ``?since=``, stop at a final close code); every message logged with its arrival and
    connection."""

    def __init__(
        self, endpoint: Endpoint, path: str, token: str, clock=time.monotonic, seed: int = 0
    ) -> None:
        self.endpoint, self.path, self.token, self.clock = endpoint, path, token, clock
        #: (arrival, connection number from 1, message) for every message but heartbeats.
        self.log: list[tuple[float, int, dict]] = []
        self.connections = 0
        #: (when, why) of every connection that ended or could not be made.
        self.drops: list[tuple[float, str]] = []
        self.final: int | None = None
        self.version: int | None = None
        #: First arrival of each status and each courier point the socket showed.
        self.seen_at: dict[str, float] = {}
        self.position_at: dict[tuple[float, float], float] = {}
        #: (arrival, status, point) of every enriched ``update``.
        self.updates: list[tuple[float, str, tuple[float, float] | None]] = []
        self._changed = asyncio.Event()
        self._rng = random.Random(seed)
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> OrderFollower:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait(self, predicate, timeout: float = PROBE_TIMEOUT, what: str = "") -> None:
        """Until ``predicate(self)`` holds; ProbeFailed after ``timeout`` or a final close."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if self.final is not None:
                raise ProbeFailed(f"socket closed with {self.final} waiting for {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                dropped = f"; drops: {self.drops[-3:]}" if self.drops else ""
                raise ProbeFailed(f"socket: no {what} in {timeout:.0f} s{dropped}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def _run(self) -> None:
        import websockets

        attempt = 0
        while True:
            since = f"?since={self.version}" if self.version is not None else ""
            try:
                async with websockets.connect(
                    self.endpoint.ws_url(self.path + since),
                    open_timeout=PROBE_TIMEOUT,
                    **self.endpoint.ws_options(self.token),
                ) as ws:
                    self.connections += 1
                    async for raw in ws:
                        if self._take(json.loads(raw)):
                            attempt = 0
                why = f"closed {ws.close_code}"
            except websockets.ConnectionClosed as exc:
                why = f"closed {exc.rcvd.code if exc.rcvd else 'without a close frame'}"
            except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                why = f"{type(exc).__name__}: {exc}"
            if self.final is not None:
                return
            self.drops.append((self.clock(), why[:200]))
            self._changed.set()
            await asyncio.sleep(reconnect_delay(attempt, self._rng))
            attempt += 1

    def _take(self, message: dict) -> bool:
        """Record one message; True when it makes the socket live (snapshot, resumed)."""
        kind = message.get("type")
        if kind in ("heartbeat", "pong"):
            return False
        now = self.clock()
        self.log.append((now, self.connections, message))
        position = None
        if kind == "error" and message.get("code") in FINAL_CLOSE_CODES:
            self.final = message["code"]
        elif kind == "snapshot":
            order = message.get("order") or {}
            for status in _shown_statuses(order):
                self.seen_at.setdefault(status, now)
            position = order.get("position")
        elif kind == "status":
            self.seen_at.setdefault(message["status"], now)
        elif kind == "update":
            for status in [message["status"], *(message.get("status_times") or {})]:
                self.seen_at.setdefault(status, now)
            position = message.get("position")
            self.updates.append((now, message["status"], _point(position)))
        elif kind == "position":
            position = message.get("position")
        if position:
            self.position_at.setdefault(_point(position), now)
        if kind in ("snapshot", "resumed", "update") and isinstance(message.get("version"), int):
            self.version = max(message["version"], self.version or 0)
        self._changed.set()
        return kind in ("snapshot", "resumed")


def socket_verdict(log: list[tuple[float, int, dict]], reached: list[str]) -> dict:
    """What a client following an order saw, against the statuses it went through:

    * ``missed``: never shown as reached (fast ``status``, an ``update``'s status or
      ``status_times``, a snapshot's timeline);
    * ``twice``: a fast status again, or an ``update`` at a version the client has;
    * ``out_of_order``: behind an earlier message of the same path (fast, or enriched);
    * ``folded`` (no fault): reached but only ever in a timeline."""
    from contract.events import status_rank

    seen: set[str] = set()
    current: set[str] = set()
    fast: set[str] = set()
    twice: list[str] = []
    backwards: list[str] = []
    top_fast = top_update = -1
    version: int | None = None
    for _, _, message in log:
        kind = message.get("type")
        if kind in ("snapshot", "resumed"):
            order = message.get("order") or {}
            seen.update(_shown_statuses(order))
            if order.get("status"):
                current.add(order["status"])
                top_update = max(top_update, status_rank(order["status"]))
            if isinstance(message.get("version"), int):
                version = max(message["version"], version if version is not None else -1)
        elif kind == "status":
            status = message["status"]
            if status in fast:
                twice.append(status)
            elif status_rank(status) < top_fast:
                backwards.append(status)
            fast.add(status)
            top_fast = max(top_fast, status_rank(status))
            seen.add(status)
            current.add(status)
        elif kind == "update":
            status, at = message["status"], message.get("version")
            if version is not None and isinstance(at, int) and at <= version:
                twice.append(f"version {at}")
            elif status_rank(status) < top_update:
                backwards.append(status)
            if isinstance(at, int):
                version = max(at, version if version is not None else -1)
            top_update = max(top_update, status_rank(status))
            seen.add(status)
            seen.update(message.get("status_times") or {})
            current.add(status)
    return {
        "missed": [s for s in reached if s not in seen],
        "twice": twice,
        "out_of_order": backwards,
        "folded": [s for s in reached if s in seen and s not in current],
        "connections": max((connection for _, connection, _ in log), default=0),
    }


def probe_people(operator, customers: int = 4) -> dict:  # noqa: ANN001 - a User
    """The probe's people: customers of its own (probe ``n`` is customer ``n % customers``,
    within each one's read budget), the operator's token, every courier's, a restaurant and
    a product."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.accounts.services import issue_token
    from tracker.couriers.models import Courier
    from tracker.customers.models import Address, Customer
    from tracker.restaurants.models import Restaurant

    tokens = []
    for index in range(customers):
        name = "longrun-probe" if index == 0 else f"longrun-probe-{index + 1}"
        user, _ = get_user_model().objects.get_or_create(username=name)
        customer, _ = Customer.objects.get_or_create(user=user)
        Address.objects.get_or_create(
            customer=customer,
            defaults={"line1": "1 Church St", "lat": 12.975, "lon": 77.605, "is_default": True},
        )
        tokens.append(issue_token(user).key)
    restaurant = Restaurant.objects.filter(is_open=True).order_by("id").first()
    product = restaurant.products.filter(is_available=True).order_by("id").first()
    couriers = {
        courier.pk: issue_token(courier.user).key
        for courier in Courier.objects.select_related("user")
    }
    people = {
        "customers": tokens,
        "last_orders": {},  # each customer's last delivered probe order
        "operator": issue_token(operator).key,
        "couriers": couriers,
        "restaurant": restaurant.pk,
        "product": product.pk,
    }
    connection.close()
    return people


def courier_token(order_id: int) -> str:
    """The token of the courier the system assigned (set up as the courier's app would be)."""
    from django.db import connection

    from tracker.accounts.services import issue_token
    from tracker.orders.models import Order

    courier = Order.objects.select_related("courier__user").get(pk=order_id).courier
    key = issue_token(courier.user).key
    connection.close()
    return key


async def probe(
    endpoint: Endpoint, people: dict, n: int, deliver: bool = False, clock=time.monotonic
) -> dict:
    """As a customer, the kitchen and a courier: place an order and follow it on a socket,
    advance it to OUT_FOR_DELIVERY, post a GPS point, and wait for the status and the point
    on the socket, in an enriched ``update`` and in the REST detail from Pinot; with
    ``deliver``, on to DELIVERED, judged by :func:`socket_verdict`. Times are ``clock``'s. A
    failed step is a result (``ok`` false, ``step``, ``error``, ``http_errors``)."""
    t0 = clock()
    row: dict = {"ok": False, "step": "read", "http_errors": [], "rest_polls": []}
    accepted: dict[str, float] = {}
    customer = people["customers"][n % len(people["customers"])]

    def refused(step: str, response) -> ProbeFailed:  # noqa: ANN001 - an httpx.Response
        row["http_errors"].append(
            {"step": step, "status": response.status_code,
             "retry_after": response.headers.get("Retry-After")}
        )  # fmt: skip
        return ProbeFailed(f"{step}: HTTP {response.status_code} {response.text[:160]}")

    async def command(client, step: str, path: str, token: str, body: dict | None = None):
        response = await client.post(path, json=body or {}, headers=_token(token))
        if response.status_code >= 300:
            raise refused(step, response)
        return response.json()

    async def rest_until(client, order_id: int, step: str, done) -> tuple[dict, float]:
        """GET the detail until ``done(body)``; every answer's code is kept."""
        deadline = time.monotonic() + PROBE_TIMEOUT
        while True:
            response = await client.get(f"/api/v1/orders/{order_id}/", headers=_token(customer))
            row["rest_polls"].append((round(clock(), 3), response.status_code))
            body = response.json() if response.status_code == 200 else {}
            if body and done(body):
                return body, clock()
            if time.monotonic() > deadline:
                raise ProbeFailed(f"{step}: REST detail {response.status_code} {str(body)[:200]}")
            # Every 0.25 s for 5 s, then every second, as a client backs off: 75 reads at
            # most, within the customer's read budget (API_THROTTLE_READS, 120/min).
            waited = PROBE_TIMEOUT - (deadline - time.monotonic())
            await asyncio.sleep(0.25 if waited < 5 else 1.0)

    async with endpoint.client() as client:
        follower = None
        try:
            if people["last_orders"].get(customer):
                last = people["last_orders"][customer]
                row["read"] = await tracking_read(client, last, customer)
            row["step"] = "place"
            placed = await command(
                client, "place", "/api/v1/orders/", customer,
                {"restaurant_id": people["restaurant"],
                 "items": [{"product_id": people["product"], "quantity": 1}],
                 "delivery": {"address": "1 Church St", "lat": 12.975, "lon": 77.605}},
            )  # fmt: skip
            accepted[placed["status"]] = clock()
            order_id = row["order_id"] = placed["id"]
            follower = OrderFollower(endpoint, f"/ws/orders/{order_id}/", customer, clock, seed=n)
            async with follower:
                row["step"] = "snapshot"
                await follower.wait(lambda f: f.log, what="snapshot")
                row["step"] = "advance"
                for _ in range(4):  # ORDER_CONFIRMED .. OUT_FOR_DELIVERY, by the kitchen
                    moved = await command(
                        client, "advance", f"/api/v1/orders/{order_id}/advance/", people["operator"]
                    )
                    accepted[moved["status"]] = clock()
                courier = (moved.get("courier") or {}).get("id")
                token = people["couriers"].get(courier) or await asyncio.to_thread(
                    courier_token, order_id
                )
                point = (round(12.97 + (n % 50) * 1e-4, 6), round(77.62 + (n % 50) * 1e-4, 6))
                row["step"] = "gps"
                response = await client.post(
                    f"/api/v1/orders/{order_id}/locations/",
                    json={"lat": point[0], "lon": point[1]},
                    headers=_token(token),
                )
                row["gps_http"] = response.status_code
                if response.status_code >= 300:
                    raise refused("gps", response)
                accepted["gps"] = clock()
                row["step"] = "socket"
                # As a client does: the status and the point from whichever message brings
                # them first (the fast path's ``status``/``position``, or an ``update``).
                await follower.wait(
                    lambda f: "OUT_FOR_DELIVERY" in f.seen_at and point in f.position_at,
                    what="OUT_FOR_DELIVERY and the point",
                )
                seen = max(follower.seen_at["OUT_FOR_DELIVERY"], follower.position_at[point])
                row["socket_s"] = round(seen - accepted["gps"], 3)
                row["step"] = "update"

                def enriched(f: OrderFollower) -> float | None:
                    return next(
                        (t for t, s, p in f.updates if s == "OUT_FOR_DELIVERY" and p == point),
                        None,
                    )

                await follower.wait(lambda f: enriched(f) is not None, what="the enriched update")
                row["update_s"] = round(enriched(follower) - accepted["gps"], 3)
                row["step"] = "rest"
                detail, at = await rest_until(
                    client, order_id, "rest",
                    lambda body: body.get("tracking", {}).get("source") == "pinot"
                    and body.get("status") == "OUT_FOR_DELIVERY" and _point(body.get("position")) == point,
                )  # fmt: skip
                row["rest_s"] = round(at - accepted["gps"], 3)
                rest = {"gps": at - accepted["gps"]}
                if deliver:
                    row["step"] = "deliver"
                    for _ in range(2):  # ARRIVING_AT_DOOR, DELIVERED, by the courier
                        moved = await command(
                            client, "deliver", f"/api/v1/orders/{order_id}/advance/", token
                        )
                        accepted[moved["status"]] = clock()
                    row["step"] = "delivered on the socket"
                    await follower.wait(lambda f: "DELIVERED" in f.seen_at, what="DELIVERED")
                    row["step"] = "delivered in REST"
                    detail, at = await rest_until(
                        client, order_id, "delivered in REST",
                        lambda body: body.get("tracking", {}).get("source") == "pinot"
                        and body.get("status") == "DELIVERED",
                    )  # fmt: skip
                    rest["DELIVERED"] = at - accepted["DELIVERED"]
                    row["rest_repeats"] = history_repeats(detail)
                    people["last_orders"][customer] = order_id
            row["accept_to_socket"] = {
                what: round(follower.seen_at[what] - when, 3)
                for what, when in accepted.items()
                if what in follower.seen_at and what != "PLACED_ORDER"  # before the socket
            }
            row["accept_to_socket"]["gps"] = round(follower.position_at[point] - accepted["gps"], 3)
            row["accept_to_rest"] = {what: round(s, 3) for what, s in rest.items()}
            verdict = socket_verdict(follower.log, [s for s in accepted if s != "gps"])
            row["socket"] = verdict
            row["step"] = "verdict"
            problems = {k: verdict[k] for k in ("missed", "twice", "out_of_order") if verdict[k]}
            if row.get("rest_repeats"):
                problems["rest_repeats"] = row["rest_repeats"]
            if problems:
                raise ProbeFailed(f"what the client saw: {problems}")
            row["ok"], row["step"] = True, "done"
        except Exception as exc:  # noqa: BLE001 - a failed probe is a result, not a crash
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            if follower is not None:
                row["pushed"] = [  # when each fast status reached the socket
                    round(t, 3) for t, _, m in follower.log if m.get("type") == "status"
                ]
                row["reconnects"] = max(0, follower.connections - 1)
                row["drops"] = [(round(t, 3), why) for t, why in follower.drops]
                reached = [s for s in accepted if s != "gps"]
                row.setdefault("socket", socket_verdict(follower.log, reached))
    row["accepted"] = {what: round(t, 3) for what, t in accepted.items()}
    row["total_s"] = round(clock() - t0, 3)
    return row


def _token(key: str) -> dict[str, str]:
    return {"Authorization": f"Token {key}"}


async def tracking_read(client, order_id: int, token: str) -> dict:  # noqa: ANN001 - httpx
    """One REST read of an order the probe finished earlier: its code and where the
    tracking came from (a read must keep answering from Pinot while the database is down)."""
    try:
        response = await client.get(f"/api/v1/orders/{order_id}/", headers=_token(token))
    except Exception as exc:  # noqa: BLE001 - a refused read is a result
        return {"status": None, "error": f"{type(exc).__name__}: {exc}"[:200]}
    body = response.json() if response.status_code == 200 else {}
    return {"status": response.status_code, "source": body.get("tracking", {}).get("source")}


def history_repeats(detail: dict) -> list:
    """Rows the REST detail's history shows twice: a status in its timeline, a point in
    the courier's trail."""
    statuses = [step["status"] for step in detail.get("timeline") or []]
    points = [(p.get("lat"), p.get("lon"), p.get("at")) for p in detail.get("path") or []]
    return [s for s in set(statuses) if statuses.count(s) > 1] + [
        p for p in set(points) if points.count(p) > 1
    ]


def _worker_values(server_pid: int, kind: str) -> dict[int, list[tuple[list, float]]]:
    """Each worker's samples of ``kind`` from prometheus-client's files of the uvicorn
    server ``server_pid``: {worker pid: [(metric, sample, labels), value]}."""
    from prometheus_client.mmap_dict import MmapedDict

    from runtime.conf import var_dir

    found: dict[int, list[tuple[list, float]]] = {}
    for path in (var_dir() / "metrics" / f"web-{server_pid}").glob(f"{kind}_*.db"):
        store = MmapedDict(str(path), read_mode=True)
        try:
            found[int(path.stem.rsplit("_", 1)[1])] = [
                (json.loads(key), value) for key, value, *_ in store.read_all_values()
            ]
        finally:
            store.close()
    return found


def requests_by_worker(server_pid: int) -> dict[int, int]:
    """HTTP requests each worker of the uvicorn server ``server_pid`` has answered so far
    (the web's request histogram)."""
    bucket = "ordertrack_http_request_duration_seconds_bucket"
    return {
        pid: int(sum(value for key, value in samples if key[1] == bucket))
        for pid, samples in _worker_values(server_pid, "histogram").items()
    }


def state_reads(server_pid: int) -> dict[str, int]:
    """Reads of an order's state so far by source, over the workers of ``server_pid``
    (``ordertrack_order_state_reads_total``: kept, or which reason sent it to Pinot)."""
    total: dict[str, int] = {}
    for samples in _worker_values(server_pid, "counter").values():
        for key, value in samples:
            if key[1] == "ordertrack_order_state_reads_total":
                source = key[2]["source"]
                total[source] = total.get(source, 0) + int(value)
    return total

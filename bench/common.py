"""What every benchmark records: the machine, the commit, percentiles, memory, results."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embedded.kafka import free_port  # noqa: E402 - the one free-port helper, re-exported

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """Cores, memory and commit, recorded with every figure."""
    mem_kb = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=RESULTS.parent.parent,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "commit": commit,
        "load_avg_1m": os.getloadavg()[0],
    }


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def rss_mb(pid: int) -> float:
    """Resident memory of a process (and nothing else), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def process_tree_rss(pid: int) -> float:
    """RSS of a process and its descendants (a component's JVM child), MiB."""
    total = rss_mb(pid)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return total
    return total + sum(process_tree_rss(int(c)) for c in children)


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process and its descendants have used so far: its
    own, its reaped children's (``cutime``/``cstime``: PostgreSQL's exited backends, the
    Python workers Spark forks per task) and its live descendants', whichever thread
    started them. Descendants are found by every process's parent in one pass over
    /proc: a thread's ``children`` file is not reliable while the process runs."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            # One that exits meanwhile is counted in its parent's cutime once reaped.
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    children: dict[int, list[int]] = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)
    total, todo = 0.0, [pid] if pid in stats else []
    while todo:
        current = todo.pop()
        total += sum(int(f) for f in stats[current][11:15])
        todo.extend(children.get(current, []))
    return total / os.sysconf("SC_CLK_TCK")


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
    (empty while the series has no sample, or for a baseline that serves no ``/metrics``)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(url, timeout=10)
    if response.status_code == 404:
        return {}
    text = response.raise_for_status().text
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


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
    return path


def baseline_tree(commit: str, same_bench: bool = False) -> Path:
    """``commit``'s tree unpacked in a temporary directory (the repository's worktrees are
    not touched), with the frontend's vendor files (not in git) copied: the old code of an
    old-vs-new benchmark, run with the same virtualenv. ``same_bench`` puts this checkout's
    ``bench/`` scripts over the old ones, so both systems are measured by the same probe
    (and by options the old scripts lack)."""
    root = RESULTS.parent.parent
    target = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    tree = subprocess.run(["git", "archive", commit], cwd=root, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=tree.stdout, check=True)
    if same_bench:
        for script in (root / "bench").glob("*.py"):
            shutil.copy(script, target / "bench" / script.name)
    vendor = root / "frontend" / "static" / "vendor"
    if vendor.is_dir():
        subprocess.run(["cp", "-r", str(vendor), str(target / "frontend" / "static")], check=True)
    return target


def operator_tokens(sockets: int, prefix: str = "bench-ops") -> list[str]:
    """API tokens of enough operators to hold ``sockets`` WebSockets, at most
    ``WS_MAX_SOCKETS_PER_USER`` each: benchmarks spread their sockets over users as real
    clients are, rather than raise the cap. Socket ``i`` uses token ``i // that cap``."""
    from django.conf import settings

    return operators(math.ceil(sockets / settings.WS_MAX_SOCKETS_PER_USER), prefix)


def operators(count: int, prefix: str = "bench-ops") -> list[str]:
    """API tokens of ``count`` operators of the benchmark's own (at least one)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    users = get_user_model().objects
    keys = []
    for n in range(max(1, count)):
        user, _ = users.get_or_create(username=f"{prefix}{n + 1}", defaults={"is_staff": True})
        keys.append(Token.objects.get_or_create(user=user)[0].key)
    return keys


# --- the REST read budget (api.throttles.ReadRateThrottle) --------------------------------
# Benchmarks read as real clients do, each user within its budget, and spread their reads
# over as many users as that takes, rather than raise the budget.

#: The share of a user's budget a benchmark plans to spend: the rest is room for warm-up
#: reads, ETag fetches and the seam between two rounds.
READ_BUDGET_SHARE = 0.8


def read_budget(staff: bool = False) -> tuple[int, int]:
    """(reads, seconds) one user may send: ``API_THROTTLE_READS``, or
    ``API_THROTTLE_READS_STAFF`` for operators and restaurant staff, as this process reads
    it (the benchmarks' servers start with this process's environment)."""
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
    """``n`` turns dealt over ``users`` round robin (in a shuffled order): at a fixed rate,
    each user's reads come evenly spaced, rate / len(users) a second, where random picks
    would bunch some users' reads over their budget."""
    order = list(users)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(n)]


def bench_customers(count: int, prefix: str) -> list[tuple[object, str]]:
    """``count`` customers of the benchmark's own, each with a delivery address and an API
    token: (Customer, token key). Made in bulk and without a password (hashing one takes
    a second by design), so a benchmark can have thousands; the ones a previous call made
    are kept."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from rest_framework.authtoken.models import Token

    from tracker.customers.models import Address, Customer
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
    Token.objects.bulk_create(
        [Token(user=u, key=Token.generate_key()) for u in users.filter(auth_token__isnull=True)],
        batch_size=500,
    )
    customers = {c.user.username: c for c in mine.select_related("user")}
    keys = dict(Token.objects.filter(user__in=users).values_list("user__username", "key"))
    return [(customers[n], keys[n]) for n in names]


def customer_orders(customers: int, timeout: float = 900, newest: int = 5000) -> list[tuple]:
    """(order id, its customer's API token) for the orders, among the ``newest``, of the
    ``customers`` customers who ordered last, once the simulator has placed orders for that
    many (waiting up to ``timeout`` seconds: at the book's peak, 50 orders a minute, a
    hundred customers take a few minutes). Tokens are made for those customers."""
    from django.db import connection
    from rest_framework.authtoken.models import Token

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
    keys = {user: Token.objects.get_or_create(user_id=user)[0].key for user in owners}
    return [(order_id, keys[user]) for order_id, user in rows if user in keys]


def token_of_socket(tokens: list[str], index: int) -> str:
    """The token socket ``index`` signs in with (see :func:`operator_tokens`)."""
    from django.conf import settings

    return tokens[index // settings.WS_MAX_SOCKETS_PER_USER]


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


@dataclass
class Serving:
    """An ASGI server started from one checkout, reading the stack's Pinot."""

    label: str
    web_url: str
    web_pid: int
    pinot_url: str
    pinot_pid: int


@dataclass
class PinotProcess:
    """Apache Pinot as ``make run`` runs it: ``python -m embedded.pinot`` (its three JVMs
    are the launcher's children), on free ports, its output in ``log``."""

    process: subprocess.Popen
    broker_url: str
    controller_url: str
    log: Path
    #: Seconds from the launch to ``pinot: ready`` (tables loaded and answering).
    ready_s: float

    @property
    def pid(self) -> int:
        return self.process.pid

    def jvm_pids(self) -> list[int]:
        """The JVMs (the launcher's live children)."""
        return children_of(self.pid)

    def cpu_s(self) -> float:
        """CPU seconds of Pinot's JVMs so far (the launcher's own, a readiness loop, not)."""
        return sum(process_tree_cpu(pid) for pid in self.jvm_pids())

    def rss_mb(self) -> float:
        """RSS of the JVMs (and the launcher), MiB."""
        return process_tree_rss(self.pid)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM the launcher (it stops the server, broker, ZooKeeper in turn)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def children_of(pid: int) -> list[int]:
    """Live children of ``pid``, whichever of its threads started them (one /proc pass)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def start_pinot(workdir: Path, timeout: float = 240) -> PinotProcess:
    """Apache Pinot on free ports (:func:`embedded.pinot.free_ports_env`, as ``make run``
    starts the ``pinot`` component), its data under ``workdir/pinot``, consuming this
    process's ``KAFKA_BOOTSTRAP_SERVERS`` and ``KAFKA_TOPIC_PREFIX``. Returns once it prints
    ``pinot: ready``; sets ``PINOT_BROKER_URL``/``PINOT_CONTROLLER_URL`` here, so this
    process's selectors read it."""
    from embedded.pinot import free_ports_env

    ports = free_ports_env()
    os.environ.update(ports)
    log = workdir / "logs" / "pinot.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ORDERTRACK_VAR_DIR": str(workdir), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "embedded.pinot"],
            cwd=RESULTS.parent.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    pinot = PinotProcess(
        process, ports["PINOT_BROKER_URL"], ports["PINOT_CONTROLLER_URL"], log, 0.0
    )
    while "pinot: ready" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() - started > timeout:
            pinot.stop()
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"Pinot did not start (see {log}):\n{tail}")
        time.sleep(0.2)
    pinot.ready_s = time.monotonic() - started
    return pinot


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


def topic_records(table: str) -> int:
    """Records in the topic ``table`` consumes (the producers are idempotent, never
    transactional, so offsets count records)."""
    from contract import kafka
    from contract.events import Topic, topic_name

    consumer = kafka.consumer()
    try:
        topic = topic_name(Topic(table))
        ends, starts = kafka.end_offsets(consumer, topic), kafka.start_offsets(consumer, topic)
        return sum(ends[p] - starts[p] for p in ends)
    finally:
        consumer.close()


def wait_pinot_caught_up(timeout: float = 300, tables: tuple[str, ...] = ENRICHED_TABLES) -> float:
    """Until Pinot holds as many rows as there are records in each table's topic (a
    deduplicated table holds fewer if a line was sent twice: the benchmarks send none);
    returns the seconds waited."""
    started = time.monotonic()
    wanted = {table: topic_records(table) for table in tables}
    for table, count in wanted.items():
        while (held := pinot_rows(table)) < count:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"Pinot holds {held} of {count} records of {table}")
            time.sleep(0.5)
    return time.monotonic() - started


@dataclass
class Stack:
    """The embedded system's parts a benchmark started (all on loopback)."""

    workdir: Path
    web_url: str
    web_pid: int
    pinot: PinotProcess
    env: dict
    web_workers: int = 2
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def pinot_url(self) -> str:
        return self.pinot.broker_url

    @property
    def pinot_pid(self) -> int:
        """The Pinot launcher, whose process tree is Pinot's JVMs."""
        return self.pinot.pid

    def wait_caught_up(self, timeout: float = 300) -> None:
        """Until Pinot has consumed everything now in the enriched topics."""
        wait_pinot_caught_up(timeout)

    def serve(self, code_dir: Path, label: str) -> Serving:
        """Another ASGI server from ``code_dir`` (another commit's checkout) on the same
        broker, database and Pinot: old and new web code serve the same data side by side
        (an old commit's own engines: ``bench/old_vs_new.py``)."""
        serving, procs = _serve(code_dir, self.env, self.web_workers, label, self.pinot)
        self.processes += procs
        return serving


def _serve(
    code_dir: Path,
    env: dict,
    web_workers: int,
    label: str,
    pinot: PinotProcess,
    profile: Path | None = None,
) -> tuple[Serving, list[subprocess.Popen]]:
    web_port = free_port()
    env = {**env, "PINOT_BROKER_URL": pinot.broker_url}
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
    server = subprocess.Popen(
        [sys.executable, *profiler, "-m", "uvicorn", "config.asgi:application",
         "--host", "127.0.0.1", "--port", str(web_port), "--no-access-log",
         "--log-level", "warning", "--workers", str(1 if profile else web_workers)],
        cwd=code_dir, env=env,
    )  # fmt: skip
    wait_port(web_port)
    serving = Serving(
        label, f"http://127.0.0.1:{web_port}", server.pid, pinot.broker_url, pinot.pid
    )
    return serving, [server]


def start_kafka(workdir: Path, log_path: Path | None = None, topics: bool = True):  # noqa: ANN201 - a KafkaBroker
    """An Apache Kafka node of the benchmark's own on ``KAFKA_BOOTSTRAP_SERVERS``'s port
    (set it to a free one first), its data under ``workdir/kafka`` and its own log in
    ``log_path`` (default ``workdir/logs/kafka.log``), with the product's topics unless
    ``topics`` is false. A node per run: no run reads another's records."""
    from contract.conf import kafka_config
    from contract.kafka import ensure_topics
    from embedded.kafka import KafkaBroker

    log_path = log_path or workdir / "logs" / "kafka.log"
    broker = KafkaBroker.fresh(workdir / "kafka", log_path=log_path, port=kafka_config().port)
    if topics:
        ensure_topics()
    return broker


def disk_mb(path: Path) -> float:
    """Disk taken under ``path`` (Kafka's log segments, a checkpoint), in MiB: blocks
    allocated, not apparent sizes, which Kafka's preallocated sparse index files inflate."""
    total = 0
    for entry in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a segment deleted meanwhile
            if entry.is_file():
                total += entry.stat().st_blocks * 512
    return round(total / 1_048_576, 1)


@contextlib.contextmanager
def embedded_stack(web_workers: int = 2, profile: Path | None = None) -> Iterator[Stack]:
    """Kafka (a child of this process), Apache Pinot (``python -m embedded.pinot`` on free
    ports) and uvicorn as their own processes, as ``make run`` runs them, on a fresh
    migrated SQLite database.

    Django is set up in this process on the same database, so a benchmark can seed
    rows and produce events before it starts measuring. With ``profile``, one uvicorn
    process runs under cProfile and writes its profile there when the stack stops.
    """
    root = RESULTS.parent.parent
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    env = {
        **os.environ,
        "ORDERTRACK_VAR_DIR": str(workdir),
        "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "KAFKA_TOPIC_PREFIX": "",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LOG_LEVEL": "WARNING",
        # Writes raised (a benchmark places and moves orders faster than people do);
        # reads are not: benchmarks spread them over users (readers_for).
        "API_THROTTLE_ORDERS": "100000/min",
        "API_THROTTLE_WRITES": "100000/min",
        "API_THROTTLE_LOCATIONS": "1000000/min",
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    broker = start_kafka(workdir)
    call_command("migrate", verbosity=0)
    processes: list[subprocess.Popen] = []
    pinot = None
    try:
        pinot = start_pinot(workdir)  # sets PINOT_BROKER_URL: this process's selectors
        env.update({k: os.environ[k] for k in ("PINOT_BROKER_URL", "PINOT_CONTROLLER_URL")})
        serving, processes = _serve(root, env, web_workers, "new", pinot, profile)
        yield Stack(workdir, serving.web_url, serving.web_pid, pinot, env, web_workers, processes)
    finally:
        for proc in processes:
            # cProfile writes its file only when the server exits by itself: SIGINT
            # (uvicorn re-raises a SIGTERM after shutting down, which kills it first).
            proc.send_signal(signal.SIGINT if profile and proc is processes[0] else signal.SIGTERM)
        for proc in processes:
            proc.wait(60 if profile else 15)
        if pinot is not None:
            pinot.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


BOOK_PEAK_PER_MIN = 50


def start_full_system(multiple: float, read_rate: float = 0):
    """Every component as ``make run`` starts it, on a fresh workdir and free ports, with
    the simulator at ``multiple`` x the book's peak. Returns (supervisor, web URL, workdir).

    ``read_rate``: the REST reads a second the benchmark will spread over customers
    (:func:`readers_for`, :func:`customer_orders`). The demo world then has twice as many
    customers as that takes (its 200, then the benchmark's own), all of whom the simulator
    orders for, so its orders soon cover enough of them; the load, orders a minute, is
    the same."""
    import io

    workdir = Path(tempfile.mkdtemp(prefix="bench-system-"))
    from embedded.pinot import free_ports_env

    web_port = free_port()
    os.environ.update(
        {
            "ORDERTRACK_VAR_DIR": str(workdir),
            "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
            "KAFKA_TOPIC_PREFIX": "",
            **free_ports_env(),  # Apache Pinot, as make run starts it
            "STREAMING_CHECKPOINT_DIR": str(workdir / "checkpoint"),
            "WEB_PORT": str(web_port),
            "SIMULATOR_RATE": str(BOOK_PEAK_PER_MIN * multiple),
            "SIMULATOR_PACE": "4",
            "LOG_LEVEL": "WARNING",
            # Writes raised (a benchmark places and moves orders faster than people do);
            # reads are not: benchmarks spread them over users (readers_for).
            "API_THROTTLE_WRITES": "100000/min",
            "API_THROTTLE_ORDERS": "100000/min",
            "API_THROTTLE_LOCATIONS": "1000000/min",
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
    )
    import django

    django.setup()
    from django.core.management import call_command

    from embedded.components import components
    from embedded.supervisor import Supervisor

    call_command("migrate", verbosity=0)
    call_command("simulate", seed_only=True, seed=42)
    from tracker.customers.models import Customer

    if read_rate and (more := 2 * readers_for(read_rate) - Customer.objects.count()) > 0:
        bench_customers(more, "bench-customer")
    log = io.StringIO()
    supervisor = Supervisor(components(), out=log)
    if not supervisor.start():
        print(log.getvalue()[-5000:])
        supervisor.stop()  # the components that did start would outlive the benchmark
        raise SystemExit("the system did not start")
    return supervisor, f"http://127.0.0.1:{web_port}", workdir


def arguments(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first paragraph describes it, and the rest
    (what it measures, how to run it) follows the options in ``--help``."""
    summary, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(
        description=summary,
        epilog=rest or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_multiple(parser: argparse.ArgumentParser, default: float = 1) -> None:
    """``--multiple``: the simulator's load, as :func:`start_full_system` takes it."""
    parser.add_argument(
        "--multiple",
        type=float,
        default=default,
        help=f"simulator load, x the book's peak of {BOOK_PEAK_PER_MIN} orders/min",
    )


def add_duration(
    parser: argparse.ArgumentParser, minutes: float, every: float, sampled: str
) -> None:
    """``--minutes`` a run lasts and ``--every`` how many seconds between its samples."""
    parser.add_argument("--minutes", type=float, default=minutes)
    parser.add_argument("--every", type=float, default=every, help=f"seconds between {sampled}")


def print_table(
    title: str, rows: list[tuple[str, ...]], header: tuple[str, ...] | None = None
) -> None:
    """A plain aligned table on stdout."""
    table = [header, *rows] if header else rows
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]))]
    print(f"\n{title}")
    for index, row in enumerate(table):
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
        if header and index == 0:
            print("  " + "  ".join("-" * w for w in widths))

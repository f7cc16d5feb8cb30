"""What one ingestion transaction of the Pinot stand-in costs as its tables grow, old vs new.

The stand-in applies every consumed batch in one DuckDB transaction (rows of each
table, history of the upsert tables, offsets). At ``make run``'s default load about
300 records a second arrive in batches of 20-30, so the fixed cost per transaction
decides whether ingestion keeps up; the history tables grow by about 360,000 rows
an hour each. This builds a file database like the embedded one (512 MB memory
limit) with ``--history`` rows already in each history table, then times
``Store.apply`` for batches of ``--rows`` rows a table, for the store at ``--baseline``
(loaded from git) and the working tree, side by side; CPU per row (the process's, DuckDB's
threads included) shows what a transaction's fixed cost makes of small batches.

Not a test. Usage::

    .venv/bin/python bench/bench_pinot_apply.py --baseline 4089917 [--history 0 250000 1000000] [--rows 30 300]

Prints a table and writes JSON to bench/results/pinot-apply-<timestamp>.json.
"""

from __future__ import annotations

import importlib.util
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, arguments, machine, print_table  # noqa: E402
from pinot import store as new_store  # noqa: E402
from pinot.definitions import load_tables  # noqa: E402

KEYS = ("p50_ms", "p99_ms", "mean_ms", "applies_per_s", "cpu_ms_per_row")

#: (topic, partition) keys the embedded ingester commits offsets for (3 topics, 4 partitions).
PARTITIONS = [(f"topic{t}", p) for t in range(3) for p in range(4)]


def load_baseline(rev: str):
    """``pinot/store.py`` as it was at ``rev``, imported as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{rev}:pinot/store.py"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "store_baseline.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("store_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def row_maker(module, table):
    """A row of ``table`` for one key and comparison value (every other column filled)."""
    cols = module.physical_columns(table)

    def make(key: int, version: int) -> tuple:
        out = []
        for name, duck_type in cols:
            if name in table.primary_key:
                out.append(key if name == "order_id" else version % 3)
            elif name == table.comparison_column or duck_type in ("BIGINT", "INTEGER"):
                out.append(version)
            elif duck_type in ("DOUBLE", "FLOAT"):
                out.append(12.97)
            elif duck_type == "BOOLEAN":
                out.append(False)
            else:
                out.append("Out for delivery")
        return tuple(out)

    return make


def prefill(store, tables, history: int) -> None:
    """``history`` rows in every history table, a row per 50 of them in the current tables."""
    cur = store.cursor()
    for table in tables.values():
        keys = max(1, history // 50)
        if table.upsert and history:
            cur.execute(
                f'INSERT INTO "{new_store.history_table(table.name)}" (order_id, {table.comparison_column}) '
                f"SELECT i % {keys}, i FROM range({history}) t(i)"
            )
        if history and table.name != "order_items_enriched":
            cur.execute(
                f'INSERT INTO "{table.name}" (order_id, {table.comparison_column}) '
                f"SELECT i, i FROM range({keys}) t(i)"
            )
    cur.execute("CHECKPOINT")


def measure(module, history: int, applies: int, rows: int, seed: int) -> dict:
    tables = load_tables()
    with tempfile.TemporaryDirectory() as tmp:
        store = module.Store(tables, str(Path(tmp) / "pinot.duckdb"), memory_limit="512MB")
        prefill(store, tables, history)
        makers = {name: row_maker(module, t) for name, t in tables.items()}
        rng = random.Random(seed)
        key = max(1, history // 50)
        version = history
        offsets = {tp: (0, "fp") for tp in PARTITIONS}
        times, cpu = [], 0.0
        for _ in range(applies):
            batches = []
            for name, table in tables.items():
                batch = [
                    makers[name](rng.randrange(key - 300, key + 5), version + i)
                    for i in range(rows)
                ]
                batches.append(module.Batch(table, batch, [False] * rows))
            key += 3
            version += rows
            offsets = {tp: (n + rows // 4, "fp") for tp, (n, _) in offsets.items()}
            start, cpu_start = time.perf_counter(), process_cpu()
            store.apply(batches, offsets)
            times.append(time.perf_counter() - start)
            cpu += process_cpu() - cpu_start
        store.conn.close()
    times.sort()
    return {
        "p50_ms": round(statistics.median(times) * 1000, 2),
        "p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 2),
        "mean_ms": round(statistics.fmean(times) * 1000, 2),
        "applies_per_s": round(len(times) / sum(times), 1),
        # DuckDB's own threads included: what the stand-in's process pays per row.
        "cpu_ms_per_row": round(cpu * 1000 / (applies * rows * len(tables)), 3),
    }


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--baseline", required=True, help="git revision of the old store")
    parser.add_argument("--history", type=int, nargs="+", default=[0, 250_000, 1_000_000])
    parser.add_argument("--applies", type=int, default=300)
    parser.add_argument(
        "--rows", type=int, nargs="+", default=[25], help="rows per table per transaction"
    )
    args = parser.parse_args()

    variants = {f"old ({args.baseline})": load_baseline(args.baseline), "new": new_store}
    results = []
    for history in args.history:
        for rows in args.rows:
            for name, module in variants.items():
                r = measure(module, history, args.applies, rows, seed=history)
                results.append({"history_rows": history, "rows": rows, "variant": name, **r})
                print(f"  history={history:>9,} rows={rows:>5} {name:<16} {r}", flush=True)
    print_table(
        "One ingestion transaction (3 tables, offsets, commit)",
        [
            (f"{r['history_rows']:,}", str(r["rows"]), r["variant"], *(str(r[k]) for k in KEYS))
            for r in results
        ],
        (
            "history rows",
            "rows/table",
            "variant",
            "p50 ms",
            "p99 ms",
            "mean ms",
            "applies/s",
            "CPU ms/row",
        ),
    )
    out = RESULTS / f"pinot-apply-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps({"params": vars(args), "machine": machine(), "results": results}, indent=2)
    )
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

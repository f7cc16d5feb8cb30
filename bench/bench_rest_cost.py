"""What the whole embedded system costs at rest: CPU per component, old vs new.

Starts the whole system (every component, as ``make run`` does, on a fresh workdir and
free ports) from each checkout in turn, once at the default load (the simulator at the
book's peak, nobody using it) and once with the simulator off, lets it settle, then
reads each component's CPU seconds (process and children, from /proc) over a window,
or several in a row (``--windows``: the stream job's JIT compiles for its first minutes).
The old code is a baseline commit's tree (``bench.common.baseline_tree``).

Not a test: prints a table and writes bench/results/rest-cost-*.json.

    nice .venv/bin/python -m bench.bench_rest_cost --baseline main --seconds 60
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import arguments, baseline_tree, machine, print_table, write_result  # noqa: E402

#: Runs inside the checkout being measured (its own bench.common and components).
CHILD = """
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from bench.common import process_tree_cpu, start_full_system

warmup, seconds, multiple = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
windows = int(sys.argv[4])
supervisor, _, workdir = start_full_system(multiple)
try:
    time.sleep(warmup)
    def cpu():
        return {c.component.name: process_tree_cpu(c.process.pid)
                for c in supervisor.children if c.process}
    def own():
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    def batches():  # the stream job's last committed micro-batch (old commit files are purged)
        commits = os.path.join(os.environ["STREAMING_CHECKPOINT_DIR"], "spark", "commits")
        ids = [int(f) for f in os.listdir(commits) if f.isdigit()] if os.path.isdir(commits) else []
        return max(ids, default=0)
    for _ in range(windows):
        before, own0, batches0, t0 = cpu(), own(), batches(), time.monotonic()
        time.sleep(seconds)
        after, own1, elapsed = cpu(), own(), time.monotonic() - t0
        cores = {n: round((after[n] - before.get(n, 0.0)) / elapsed, 3) for n in after}
        cores["supervisor"] = round((own1 - own0) / elapsed, 3)
        cores["total"] = round(sum(cores.values()), 3)
        cores["stream_batches_per_s"] = round((batches() - batches0) / elapsed, 2)
        print("RESULT " + json.dumps(cores), flush=True)
finally:
    supervisor.stop()
"""


def measure(
    checkout: Path,
    simulator: bool,
    warmup: float,
    seconds: float,
    windows: int,
    log: Path,
    extra_env: dict[str, str],
) -> list[dict]:
    """CPU per component in each of ``windows`` consecutive windows after ``warmup``."""
    env = {
        **__import__("os").environ,
        **extra_env,
        "SIMULATOR_ENABLED": "true" if simulator else "false",
        "PYTHONPATH": str(checkout),
    }
    with log.open("a") as out:
        out.write(f"\n=== {checkout} simulator={simulator}\n")
        out.flush()
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(warmup), str(seconds), "1", str(windows)],
            cwd=checkout,
            env=env,
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            timeout=warmup + seconds * windows + 600,
        )
    found = [
        json.loads(line[len("RESULT ") :])
        for line in proc.stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    return found or [{"error": f"exit {proc.returncode}: {proc.stdout[-2000:]}"}]


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--baseline", default="main", help="commit of the old code")
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--windows", type=int, default=1, help="consecutive windows of --seconds (JIT warm-up)"
    )
    parser.add_argument(
        "--loads", default="default,rest", help="default (the simulator on), rest (off)"
    )
    parser.add_argument("--note", default="", help="stored with the result (e.g. a shared machine)")
    parser.add_argument(
        "--new-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the new code only (a lever measured against the same commit)",
    )
    args = parser.parse_args()
    new_env = dict(pair.split("=", 1) for pair in args.new_env)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log = ROOT / "bench" / "results" / f"rest-cost-{stamp}.log"
    baseline = subprocess.run(
        ["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    new = "new" + "".join(f" {name}={value}" for name, value in new_env.items())
    checkouts = {f"old {baseline}": (baseline_tree(args.baseline), {}), new: (ROOT, new_env)}
    results: dict = {}
    for simulator in [{"default": True, "rest": False}[load] for load in args.loads.split(",")]:
        for label, (checkout, env) in checkouts.items():
            key = f"{label}, simulator {'on (default load)' if simulator else 'off'}"
            windows = measure(
                checkout, simulator, args.warmup, args.seconds, args.windows, log, env
            )
            for index, cores in enumerate(windows):
                start = args.warmup + index * args.seconds
                name = key if len(windows) == 1 else f"{key}, from {start:.0f} s"
                results[name] = cores
                print(name, json.dumps(cores), flush=True)
    names = sorted({n for r in results.values() for n in r if n != "error"} - {"total"})
    names = [n for n in names if n != "stream_batches_per_s"] + ["stream_batches_per_s"]
    print_table(
        "CPU (cores) per component at rest",
        [(k, *(str(r.get(n, "-")) for n in [*names, "total"])) for k, r in results.items()],
        ("run", *names, "total"),
    )
    path = write_result(
        "rest-cost",
        {
            "machine": machine(),
            "settings": vars(args) | {"log": log.name},
            "note": args.note,
            "cores": results,
        },
    )
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()

"""What the whole embedded system costs at rest: CPU per component (run it on two commits to compare them).

Starts the whole system (every component, as ``make run`` does, on a fresh workdir and
free ports), once at the default load (the simulator at the
book's peak, nobody using it) and once with the simulator off, lets it settle, then
reads each component's CPU seconds (process and children, from /proc) over a window,
or several in a row (``--windows``: the stream job's JIT compiles for its first minutes).
The old code is a baseline commit's tree (``bench.harness.baseline_tree``).

Not a test: prints a table and writes bench/results/rest-cost-*.json.

    nice .venv/bin/python -m bench rest_cost --seconds 60
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench import harness


def stream_batches(checkpoint: Path) -> int:
    """The stream job's last committed micro-batch (old commit files are purged)."""
    commits = checkpoint / "spark" / "commits"
    return max((int(f.name) for f in commits.glob("[0-9]*")), default=0)


def own_cpu_s() -> float:
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(simulator: bool, args: argparse.Namespace) -> list[dict]:
    """CPU per component in each of ``--windows`` consecutive windows after ``--warmup``."""
    env = {"SIMULATOR_ENABLED": "true" if simulator else "false"}
    with harness.system(env=env, seed=True) as system:
        checkpoint = Path(system.env["STREAMING_CHECKPOINT_DIR"])
        time.sleep(args.warmup)

        def cpu() -> dict[str, float]:
            return {c.component.name: harness.process_tree_cpu(c.process.pid)
                    for c in system.children if c.process}  # fmt: skip

        windows = []
        for _ in range(args.windows):
            before, own0, batches0, t0 = (
                cpu(),
                own_cpu_s(),
                stream_batches(checkpoint),
                time.monotonic(),
            )
            time.sleep(args.seconds)
            after, elapsed = cpu(), time.monotonic() - t0
            cores = {n: round((after[n] - before.get(n, 0.0)) / elapsed, 3) for n in after}
            cores["supervisor"] = round((own_cpu_s() - own0) / elapsed, 3)
            cores["total"] = round(sum(cores.values()), 3)
            cores["stream_batches_per_s"] = round(
                (stream_batches(checkpoint) - batches0) / elapsed, 2
            )
            windows.append(cores)
    return windows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument(
        "--windows", type=int, default=1, help="consecutive windows of --seconds (JIT warm-up)"
    )
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--loads", default="default,rest", help="default (the simulator on), rest (off)"
    )
    parser.add_argument("--note", default="", help="stored with the result (e.g. a shared machine)")


def run(args: argparse.Namespace) -> dict:
    results: dict = {}
    for load in args.loads.split(","):
        simulator = {"default": True, "rest": False}[load]
        key = f"simulator {'on (default load)' if simulator else 'off'}"
        windows = measure(simulator, args)
        for index, cores in enumerate(windows):
            start = args.warmup + index * args.seconds
            results[key if len(windows) == 1 else f"{key}, from {start:.0f} s"] = cores
    names = sorted({n for r in results.values() for n in r} - {"total", "stream_batches_per_s"})
    names += ["stream_batches_per_s"]
    harness.print_table(
        "CPU (cores) per component at rest",
        [(k, *(str(r.get(n, "-")) for n in [*names, "total"])) for k, r in results.items()],
        ("run", *names, "total"),
    )
    return {"note": args.note, "cores": results}

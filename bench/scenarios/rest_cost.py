"""What the whole embedded system costs at rest: CPU per component (run it on two commits to compare them).

The whole system at the default load (the simulator at the book's peak, nobody using
it) and again with the simulator off; after ``--warmup``, each component's CPU seconds
over ``--windows`` windows of ``--seconds`` (the stream job's JIT compiles for minutes).

    nice .venv/bin/python -m bench rest_cost --seconds 60
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench import harness


def stream_batches(checkpoint: Path) -> int:
    """The stream job's last committed micro-batch (old commit files are purged)."""
    commits = checkpoint / "spark" / "commits"
    return max((int(f.name) for f in commits.glob("[0-9]*")), default=0)


def measure(simulator: bool, args: argparse.Namespace) -> list[dict]:
    """CPU per component in each of ``--windows`` consecutive windows after ``--warmup``."""
    env = {"SIMULATOR_ENABLED": "true" if simulator else "false"}
    with harness.system(env=env, seed=True) as system:
        checkpoint = Path(system.env["STREAMING_CHECKPOINT_DIR"])
        time.sleep(args.warmup)

        def cpu() -> dict[str, float]:
            return harness.cpu_of(harness.pids_of(system.children))

        windows = []
        for _ in range(args.windows):
            before, own0, batches0, t0 = (
                cpu(),
                time.process_time(),
                stream_batches(checkpoint),
                time.monotonic(),
            )
            time.sleep(args.seconds)
            after, elapsed = cpu(), time.monotonic() - t0
            cores = {n: round((after[n] - before.get(n, 0.0)) / elapsed, 3) for n in after}
            cores["supervisor"] = round((time.process_time() - own0) / elapsed, 3)
            cores["total"] = round(sum(cores.values()), 3)
            cores["stream_batches_per_s"] = round(
                (stream_batches(checkpoint) - batches0) / elapsed, 2
            )
            windows.append(cores)
    return windows


OPTIONS = {
    "--warmup": 60.0,
    "--windows": (1, "consecutive windows of --seconds (JIT warm-up)"),
    "--seconds": 60.0,
    "--loads": ("default,rest", "default (the simulator on), rest (off)"),
}


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

"""Run one benchmark on an old commit and on this checkout, one after the other, each
with its own code, its own virtualenv and its own engines, and print them side by side.

For changes that swap what a benchmark runs on (its engines, its requirements): the old
commit's own script starts the old system from the old tree with the old virtualenv
(``--old-python``; build it from that commit's requirements.txt), this checkout's starts
the new one. Both get the same arguments; each writes its JSON result as usual, and
this script writes one more with both (``bench/results/<script>-old-vs-new-<stamp>.json``).

    .venv/bin/python bench/old_vs_new.py --old-tree ../old-97fdc76 \\
        --old-python ../old-97fdc76/.venv/bin/python bench_streaming.py -- --levels 10,100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BASE_DIR = RESULTS.parent.parent


def run(python: str, tree: Path, script: str, args: list[str], log: Path) -> Path | None:
    """Run ``tree``'s ``bench/<script>``; the result file it wrote (None when none)."""
    before = set(RESULTS.glob("*.json")) | set((tree / "bench" / "results").glob("*.json"))
    with log.open("w") as out:
        code = subprocess.call(
            [python, str(tree / "bench" / script), *args], cwd=tree, stdout=out, stderr=out
        )
    after = set(RESULTS.glob("*.json")) | set((tree / "bench" / "results").glob("*.json"))
    written = sorted(after - before, key=lambda p: p.stat().st_mtime)
    if code != 0 or not written:
        print(f"{tree}: {script} exited with {code}; see {log}", file=sys.stderr)
    return written[-1] if written else None


def rows(result: dict) -> list[dict]:
    return result.get("results") or [result]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--old-python", required=True)
    parser.add_argument("--new-python", default=sys.executable)
    parser.add_argument("--columns", default="", help="comma-separated result keys to print")
    parser.add_argument("script", help="a script of bench/, e.g. bench_streaming.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: the script's options")
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = Path(options.script).stem
    RESULTS.mkdir(exist_ok=True)
    out: dict = {"script": options.script, "args": args, "measured_at": stamp}
    for side, python, tree in (
        ("old", options.old_python, options.old_tree.resolve()),
        ("new", options.new_python, BASE_DIR),
    ):
        log = RESULTS / f"{name}-old-vs-new-{stamp}-{side}.log"
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True
        ).stdout.strip()
        path = run(python, tree, options.script, args, log)
        out[side] = {
            "commit": commit or tree.name,
            "log": log.name,
            "result": json.loads(path.read_text()) if path else None,
        }
    path = RESULTS / f"{name}-old-vs-new-{stamp}.json"
    path.write_text(json.dumps(out, indent=2, sort_keys=True))
    columns = [c for c in options.columns.split(",") if c]
    for side in ("old", "new"):
        result = out[side]["result"]
        print(f"== {side} {out[side]['commit']}")
        for row in rows(result) if result else []:
            if not isinstance(row, dict):  # a result without rows of figures
                continue
            keys = columns or [k for k, v in row.items() if isinstance(v, int | float | str)]
            print("   " + ", ".join(f"{k}={row.get(k)}" for k in keys))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

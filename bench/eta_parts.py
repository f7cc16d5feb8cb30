"""Where the arrival prediction's error comes from: each part (kitchen, ride, door) of every
prediction a ``bench_eta.py --workdir DIR`` run kept, against what actually happened.

Per step: MAE, bias and standard deviation of the total and of each part's predicted
remaining seconds. At placement also a reference that knows what the predictor never
sees, the simulator's own settings (each restaurant's pace, the hour's kitchen load and
traffic, the streets' two legs): the error left there is each order's own randomness, the
floor of this simulation. Analysis only.

Usage::

    .venv/bin/python bench/eta_parts.py DIR
"""

from __future__ import annotations

import math
import os
import pickle
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KITCHEN = ("PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED")
ZONE_OFFSET_MS = 19_800_000  # Asia/Kolkata, the bench's zone (no daylight saving)


def line(name: str, errors: list[float]) -> str:
    mae = sum(abs(e) for e in errors) / len(errors) / 60
    bias = sum(errors) / len(errors) / 60
    return (
        f"  {name:9s} MAE {mae:5.2f} min  bias {bias:+.2f}  sd {statistics.pstdev(errors) / 60:.2f}"
    )


def actual_parts(times: dict, step: str, at: int) -> dict[str, float]:
    """Seconds each part still took after ``at``."""
    parts = {"door": (times["DELIVERED"] - max(at, times["ARRIVING_AT_DOOR"])) / 1000}
    if step != "ARRIVING_AT_DOOR":
        leaving = max(at, times["OUT_FOR_DELIVERY"])
        parts["ride"] = (times["ARRIVING_AT_DOOR"] - leaving) / 1000
    if step in KITCHEN:
        parts["kitchen"] = (times["OUT_FOR_DELIVERY"] - at) / 1000
    return parts


def reference_at_placement(row: dict) -> float:
    """Seconds from placement to delivered expected by someone who knows the simulator."""
    from contract import geo
    from tracker.simulator import engine

    def hour(ms: int) -> int:
        return int((ms + ZONE_OFFSET_MS) % 86_400_000 // 3_600_000)

    times = row["times"]
    pace = 0.25  # the bench's default --pace
    steps = sum((low + high) / 2 for (low, high) in list(engine.KITCHEN_WAITS.values())[:4])
    load = engine.KITCHEN_LOAD_BY_HOUR[hour(row["at"])]
    kitchen = steps / pace * engine.kitchen_pace(row["restaurant_id"]) * load
    bearing = math.radians(geo.bearing_deg(*row["restaurant"], *row["destination"]))
    streets = geo.haversine_km(*row["restaurant"], *row["destination"]) * (
        abs(math.sin(bearing)) + abs(math.cos(bearing))
    )
    speed = geo.COURIER_SPEED_KMH * engine.TRAFFIC_BY_HOUR[hour(times["OUT_FOR_DELIVERY"])]
    ride = max(streets - 0.15, 0) / speed * 3600 + 15  # arriving within 150 m, GPS every 30 s
    low, high = engine.KITCHEN_WAITS[engine.OrderStatus.ARRIVING_AT_DOOR]
    return kitchen + ride + (low + high) / 2 / pace


def main() -> int:
    from bench.common import arguments

    parser = arguments(__doc__)
    parser.add_argument("workdir", type=Path, help="a ``bench_eta.py --workdir`` directory")
    workdir = parser.parse_args().workdir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("ORDERTRACK_VAR_DIR", str(workdir))
    import django

    django.setup()
    rows = pickle.loads((workdir / "predictions.pickle").read_bytes())
    by_step: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_step[row["step"]].append(row)
    for step, step_rows in by_step.items():
        errors: dict[str, list[float]] = defaultdict(list)
        for row in step_rows:
            times = row["times"]
            errors["total"].append((row["arrives_at"] - times["DELIVERED"]) / 1000)
            errors["baseline"].append((row["baseline"] - times["DELIVERED"]) / 1000)
            actual = actual_parts(times, step, row["at"])
            for part, predicted in row["basis"]["seconds_ahead"].items():
                errors[part].append(predicted - actual[part])
            if step == "PLACED_ORDER":
                took = (times["DELIVERED"] - row["at"]) / 1000
                errors["reference"].append(reference_at_placement(row) - took)
        print(f"{step} ({len(step_rows)} predictions)")
        for name in ("total", "kitchen", "ride", "door", "baseline", "reference"):
            if errors[name]:
                print(line(name, errors[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

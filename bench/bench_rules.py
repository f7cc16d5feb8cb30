"""Benchmark the stream job's validation: expression size and per-batch planning time.

Not a test. Spark re-optimises and re-plans the job's whole plan on every micro-batch,
so the size of the validation expressions is paid on every batch. This bench builds
``streaming.enrich.outputs`` of this tree and of ``--baseline`` (a commit's
``streaming/enrich.py``, loaded beside this one) over the same streaming source (Spark's
``rate`` source shaped into the Kafka source's columns, cycling through valid and
invalid messages of every source topic), runs each as a streaming query for
``--batches`` micro-batches, alternating old and new, and reports:

* the characters of the SQL of the validation (the reason, and the verdict alone);
* the per-batch ``queryPlanning`` time Spark reports, and the whole batch time.

    .venv/bin/python bench/bench_rules.py [--baseline main] [--batches 40] [--rounds 3]
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.common import RESULTS, arguments, machine, percentile  # noqa: E402


def _load_enrich(commit: str):
    """``streaming/enrich.py`` of ``commit`` as a module (it imports today's contract, and
    today's ``streaming/validation.py`` if ``commit`` is after the validation moved there)."""
    text = subprocess.run(
        ["git", "show", f"{commit}:streaming/enrich.py"],
        capture_output=True, text=True, check=True, cwd=BASE_DIR,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / f"enrich_{commit.replace('/', '_')}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sizes(enrich) -> dict[str, int]:
    """Characters of the validation SQL Spark plans (old: per class, reason and verdict in
    one CASE; new: one verdict, one reason, one constant check table)."""
    if not hasattr(enrich, "validation_reason"):  # since split off into streaming/validation.py
        enrich = importlib.import_module("streaming.validation")
    if hasattr(enrich, "check_table"):
        verdict, reason = len(enrich.validation_verdict()), len(enrich.validation_reason())
        return {
            "validation_sql_chars": verdict + reason,
            "verdict_sql_chars": verdict,
            "reason_sql_chars": reason,
            "check_table_literal_chars": len(enrich.check_table()),
        }
    total = sum(len(enrich.validation_reason(c)) for c in enrich.SOURCE_EVENTS.values())
    return {"validation_sql_chars": total}


def _messages(invalid_share: float) -> list[tuple[str, bytes, bytes]]:
    """(topic, key, value): valid messages of every source topic, and every kind of
    invalid one, about ``invalid_share`` of them."""
    from contract.events import OrderStatus, now_ms
    from tests.integration.streaming.test_streaming_enrich import _mutations, placed, point, status

    t = now_ms() - 60_000
    invalid = [(topic.value, b"1", value or b"") for topic, _, value in _mutations()]
    valid = []
    want = round(len(invalid) * (1 - invalid_share) / max(invalid_share, 1e-9))
    for n in range(max(1, want // 3)):
        evs = [placed(n + 1, t), status(OrderStatus.ORDER_CONFIRMED, t + 1, n + 1),
               point(t + 2, 0.5, n + 1)]  # fmt: skip
        valid += [(e.TOPIC.value, e.key(), e.to_json()) for e in evs]
    return valid + invalid


def _source(spark, rows_per_batch: int, invalid_share: float):
    """A streaming DataFrame with the Kafka source's columns, cycling through _messages()."""
    from pyspark.sql import functions as F

    msgs = _messages(invalid_share)
    topics = F.array(*[F.lit(t) for t, _, _ in msgs])
    keys = F.array(*[F.lit(k) for _, k, _ in msgs])
    values = F.array(*[F.lit(v) for _, _, v in msgs])
    i = (F.col("value") % len(msgs)).cast("int") + 1
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .load()
        .select(
            F.element_at(keys, i).alias("key"),
            F.element_at(values, i).alias("value"),
            F.element_at(topics, i).alias("topic"),
            F.lit(0).alias("partition"),
            F.col("value").alias("offset"),
            F.col("timestamp"),
        )
    )


def _run(spark, enrich, batches: int, rows_per_batch: int, share: float, workdir: Path) -> dict:
    stream = enrich.outputs(_source(spark, rows_per_batch, share))
    query = (
        stream.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(workdir / f"cp-{time.monotonic_ns()}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while (query.lastProgress or {}).get("batchId", -1) < batches:
            if query.exception() is not None:
                raise RuntimeError(query.exception())
            time.sleep(0.2)
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["batchId"] >= 2][:batches]  # warm
    planning = [p["durationMs"].get("queryPlanning", 0) for p in progress]
    total = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    return {"planning_ms": planning, "batch_ms": total}


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows-per-batch", type=int, default=200)
    parser.add_argument("--invalid-share", type=float, default=0.05)
    args = parser.parse_args()

    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from streaming import enrich as new
    from streaming.session import spark_session
    from streaming.settings import Settings

    old = _load_enrich(args.baseline)
    spark = spark_session(Settings(shuffle_partitions=2), app_name="bench-rules")
    variants = {"old": old, "new": new}
    runs: dict[str, dict[str, list[float]]] = {
        name: {"planning_ms": [], "batch_ms": []} for name in variants
    }
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, module in variants.items():
                got = _run(
                    spark, module, args.batches, args.rows_per_batch, args.invalid_share, Path(tmp)
                )
                for key, values in got.items():
                    runs[name][key] += values
    spark.stop()

    result = {
        "bench": "rules",
        "machine": machine(),
        "note": "other helpers' tests shared the 2-core machine during the run",
        "baseline": args.baseline,
        "batches_per_round": args.batches,
        "rounds": args.rounds,
        "rows_per_batch": args.rows_per_batch,
        "invalid_share": args.invalid_share,
        "variants": {},
    }
    print(f"{'':5} {'SQL chars':>10} {'plan p50':>9} {'plan p90':>9} {'batch p50':>9}")
    for name, module in variants.items():
        planning, batch = runs[name]["planning_ms"], runs[name]["batch_ms"]
        row = {
            **_sizes(module),
            "planning_ms_p50": statistics.median(planning),
            "planning_ms_p90": percentile(planning, 90),
            "planning_ms_mean": round(statistics.fmean(planning), 1),
            "batch_ms_p50": statistics.median(batch),
            "batch_ms_p90": percentile(batch, 90),
            "batches": len(planning),
        }
        result["variants"][name] = row
        print(
            f"{name:5} {row['validation_sql_chars']:>10} {row['planning_ms_p50']:>9} "
            f"{row['planning_ms_p90']:>9} {row['batch_ms_p50']:>9}"
        )
    out = RESULTS / f"rules-old-vs-new-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

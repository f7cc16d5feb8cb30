"""The order-detail read path, traced: which project functions ``GET /api/v1/orders/<id>/``
calls from the view's handler to its answer (through the pinotdb queries), in each checkout.

Each checkout (this one, and ``--baseline``'s tree) runs the same child in its own process,
on an Apache Kafka node of its own that this script starts: Apache Pinot on free ports
(the child's own JVMs, consuming that node), a fresh SQLite database, one order on the road with a courier's trail, then
the detail read three times (the first fills the per-process copies) and the third traced
with ``sys.setprofile``. Counted:

* project calls: Python functions of the checkout (not the virtualenv) entered while the
  handler runs; comprehensions and generator expressions (``<listcomp>``...) apart;
* files: the distinct project files those functions live in;
* returns: how often the innermost project frame moves into a file it had already left
  (A -> B -> A counts one; each call into or return to such a file counts);
* pinotdb queries: calls of pinotdb's ``Cursor.execute``;
* Python calls, libraries included, in the whole handler (a proxy for its CPU cost that
  other work on the machine does not disturb), and the CPU time a request takes.

Each is reported up to the first pinotdb query (the path the issue counts) and for the
whole handler (the answer's shaping, ETA and ETag included).

Not a test: prints a table and writes bench/results/trace-order-detail-*.json.

    nice .venv/bin/python -m bench.trace_order_detail --baseline main
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    arguments,
    baseline_tree,
    free_port,
    machine,
    print_table,
    start_kafka,
    write_result,
)

#: Runs inside the checkout being traced (its own modules and test builders).
CHILD = r"""
import json, os, shutil, sys, tempfile, time
sys.path.insert(0, os.getcwd())
root = os.path.realpath(os.getcwd()) + os.sep
os.environ.update({
    "ORDERTRACK_VAR_DIR": tempfile.mkdtemp(prefix="trace-"),
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "LOG_LEVEL": "WARNING",
})
import django
django.setup()
from django.core.management import call_command
from localrun.kafka import free_port
from localrun.pinot import LocalPinot
try:
    from localrun.pinot.conf import Ports
except ImportError:  # a checkout from before localrun/pinot/__init__.py was split
    from localrun.pinot import Ports

call_command("migrate", verbosity=0)
pinot = LocalPinot(data_dir=os.path.join(os.environ["ORDERTRACK_VAR_DIR"], "pinot"),
                   ports=Ports(*(free_port() for _ in range(5)))).start()
os.environ["PINOT_BROKER_URL"] = pinot.broker_url
try:
    from runtime import kafka
    from rest_framework.test import APIClient
    from contract.events import LIFECYCLE, OrderStatus, now_ms
    from tests.factories import make_courier, make_customer, make_restaurant, place
    from tests.fixtures_pinot import delivery_event, order_event
    from tracker.tracking.selectors.store import query
    from tracker.orders import services
    from tracker.orders.policy import SYSTEM

    alice, restaurant, rider = make_customer("alice"), make_restaurant("Alpha"), make_courier()
    order = place(alice, restaurant)
    for status in LIFECYCLE[1:4]:
        services.advance_order(order.pk, by=SYSTEM, to=status)
    services.advance_order(order.pk, by=SYSTEM, to=OrderStatus.OUT_FOR_DELIVERY, courier=rider)
    t0, minute = now_ms() - 20 * 60_000, 60_000
    common = dict(customer_id=alice.pk, restaurant_id=restaurant.pk, created_at=t0, total=18.5)
    times = {"ORDER_CONFIRMED": t0 + minute, "BEING_PREPARED": t0 + 3 * minute,
             "BEING_COOKED": t0 + 6 * minute}
    producer = kafka.producer()
    for event in (
        order_event(order.pk, 6, "OUT_FOR_DELIVERY", **common, status_time=t0 + 10 * minute,
                    status_times=times, courier=(rider.pk, 12.961, 77.63, t0 + 11 * minute),
                    distance_left_km=1.25),
        delivery_event(order.pk, 6, 12.961, 77.63, courier_id=rider.pk,
                       restaurant_id=restaurant.pk, at=t0 + 11 * minute),
    ):
        kafka.publish(producer, event)
    assert producer.flush(10) == 0
    def held(table):
        rows = query(f"SELECT COUNT(*) AS n FROM {table} WHERE order_id = {order.pk}")
        return bool(rows and rows[0]["n"])  # 0.11: no row, or a row of 0, when none

    # Waited for here, not with tests.waiting: the child runs in older checkouts too.
    deadline = time.monotonic() + 60
    while not (held("orders_enriched") and held("delivery_statuses")):
        assert time.monotonic() < deadline, "Pinot did not ingest the order in 60 s"
        time.sleep(0.1)
    client = APIClient()
    client.force_authenticate(alice.user)
    url = f"/api/v1/orders/{order.pk}/"
    for _ in range(2):
        assert client.get(url).status_code == 200

    from api.views import orders as views
    handler = views.OrderDetailView.get
    handler_code = getattr(handler, "__wrapped__", handler).__code__
    calls, inner, pinot_queries = [], [], 0
    state = {"on": False, "stack": [], "all": 0}

    def project(frame):
        name = frame.f_code.co_filename
        if not os.path.isabs(name):
            return None  # <frozen os>, a dataclass's generated __init__
        name = os.path.realpath(name)
        if name.startswith(root) and os.sep + ".venv" + os.sep not in name:
            return name[len(root):]
        return None

    def profile(frame, event, arg):
        global pinot_queries
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if not state["on"]:
            if event == "call" and code is handler_code:
                state["on"] = True
            else:
                return
        where = project(frame)
        if event == "call":
            state["all"] += 1
            if where is None:
                if code.co_name == "execute" and "pinotdb" in code.co_filename:
                    pinot_queries += 1
                    if not first_query:
                        first_query.extend([len(calls), len(inner_moves)])
                return
            (inner if code.co_name.startswith("<") else calls).append(
                {"file": where, "function": code.co_qualname})
            state["stack"].append(where)
            inner_moves.append(where)
        elif where is not None:
            state["stack"].pop()
            if state["stack"]:
                inner_moves.append(state["stack"][-1])
            if code is handler_code:
                state["on"] = False

    inner_moves, first_query = [], []
    sys.setprofile(profile)
    response = client.get(url)
    sys.setprofile(None)
    assert response.status_code == 200, response.status_code
    assert response.json()["tracking"]["source"] == "pinot"
    def returns_in(moves):
        left, returns, current = set(), 0, None
        for where in moves:
            if where != current:
                if where in left:
                    returns += 1
                if current is not None:
                    left.add(current)
                current = where
        return returns

    def summary(upto_calls, upto_moves):
        shown = calls[:upto_calls]
        return {
            "project_calls": len(shown),
            "files": sorted({c["file"] for c in shown}),
            "returns_to_a_file_left": returns_in(inner_moves[:upto_moves]),
            "calls": [f"{c['file']}:{c['function']}" for c in shown],
        }

    import statistics, time
    took = []  # CPU time of this process (Django's part; Pinot's JVMs are apart): less
    for _ in range(100):  # sensitive than wall time to other work on a shared machine
        started = time.process_time()
        assert client.get(url).status_code == 200
        took.append((time.process_time() - started) * 1000)

    print("RESULT " + json.dumps({
        "request_cpu_ms": {"median": round(statistics.median(took), 2),
                           "p10": round(statistics.quantiles(took, n=10)[0], 2)},
        "to_the_pinotdb_call": summary(*first_query),
        "whole_handler": {**summary(len(calls), len(inner_moves)),
                          "comprehension_frames": len(inner), "pinotdb_queries": pinot_queries,
                          "python_calls_all_libraries": state["all"]},
    }), flush=True)
finally:
    pinot.stop()
    shutil.rmtree(os.environ["ORDERTRACK_VAR_DIR"], ignore_errors=True)
"""


def trace(checkout: Path, log: Path) -> dict:
    # A Kafka node per checkout (started here: an old checkout may not have the
    # launcher), with the product's topics, so each child reads only its own records.
    data = Path(tempfile.mkdtemp(prefix="trace-kafka-"))
    os.environ.update(
        {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}", "KAFKA_TOPIC_PREFIX": ""}
    )
    broker = start_kafka(data, log_path=data / "kafka.log")
    try:
        with log.open("a") as out:
            out.write(f"\n=== {checkout}\n")
            out.flush()
            proc = subprocess.run(
                [sys.executable, "-c", CHILD],
                cwd=checkout,
                env={**os.environ, "PYTHONPATH": str(checkout)},
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                timeout=600,
            )
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise SystemExit(f"the trace in {checkout} failed (see {log})")


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--baseline", help="a commit to trace side by side (its tree)")
    args = parser.parse_args()
    log = ROOT / "bench" / "results" / "trace-order-detail.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("")
    runs = {}
    if args.baseline:
        old = baseline_tree(args.baseline)
        try:
            runs[f"old ({args.baseline})"] = trace(old, log)
        finally:
            shutil.rmtree(old, ignore_errors=True)
    runs["new"] = trace(ROOT, log)
    rows = [
        (label, part, str(r[part]["project_calls"]), str(len(r[part]["files"])),
         str(r[part]["returns_to_a_file_left"]))
        for label, r in runs.items()
        for part in ("to_the_pinotdb_call", "whole_handler")
    ]  # fmt: skip
    print_table(
        "GET /api/v1/orders/<id>/ (warm), from the view's handler (shared machine: indicative)",
        rows,
        ("code", "span", "project calls", "files", "returns"),
    )
    for label, r in runs.items():
        print(
            f"{label}: {r['whole_handler']['python_calls_all_libraries']} Python calls in the handler, libraries included"
        )
        cpu = r["request_cpu_ms"]
        print(f"{label}: {cpu['median']} ms CPU a request (median of 100; p10 {cpu['p10']})")
    for label, r in runs.items():
        print(f"\n{label}, to the pinotdb call:")
        for call in r["to_the_pinotdb_call"]["calls"]:
            print(f"  {call}")
    path = write_result("trace-order-detail", {"machine": machine(), "runs": runs})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()

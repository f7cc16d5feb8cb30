"""What the embedded broker's gate costs: the same clients on a bounded broker (Tansu
behind the gate) and on a bare Tansu, alternating.

The gate (``embedded/broker.py``) relays every client's requests one whole request at a
time and counts the record batches of each produce request (the batch bound). Measured:
one-record produce round trips (produce, flush: the acknowledgement's latency), and a
reader's catch-up over the records written. Not a test: prints a table and writes
bench/results/gate-*.json.

    .venv/bin/python bench/bench_gate.py --records 3000 --rounds 3
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import arguments, machine, percentile, print_table, write_result  # noqa: E402


def round_trips(bootstrap: str, topic: str, records: int) -> list[float]:
    """Seconds per one-record produce acknowledged (each its own batch)."""
    from contract import kafka
    from contract.conf import KafkaConfig

    prod = kafka.producer(KafkaConfig(bootstrap_servers=bootstrap), **{"linger.ms": 0})
    out = []
    for i in range(records):
        batch = kafka.Deliveries(prod)
        started = time.perf_counter()
        batch.produce(topic, b"k", b"%d" % i, partition=i % 3)
        batch.flush(10)
        out.append(time.perf_counter() - started)
    return out


def catch_up(bootstrap: str, topic: str) -> tuple[float, int]:
    """Seconds to read the topic from its start to its end, and the records read."""
    from contract import kafka
    from contract.conf import KafkaConfig

    cons = kafka.consumer(KafkaConfig(bootstrap_servers=bootstrap))
    try:
        started = time.perf_counter()
        ends = kafka.end_offsets(cons, topic)
        from confluent_kafka import TopicPartition

        cons.assign([TopicPartition(topic, p, 0) for p in ends])
        todo, read = {p for p, e in ends.items() if e > 0}, 0
        while todo:
            for msg in cons.consume(1000, timeout=1):
                if msg.error() is None:
                    read += 1
                    if msg.offset() + 1 >= ends[msg.partition()]:
                        todo.discard(msg.partition())
        return time.perf_counter() - started, read
    finally:
        cons.close()


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=3000, help="per path and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--note", default="", help="how it was run")
    args = parser.parse_args()

    from contract.conf import KafkaConfig
    from contract.events import Topic, topic_name
    from embedded.broker import BoundedBroker, EmbeddedBroker, free_port

    os.environ["KAFKA_TOPIC_PREFIX"] = "gatebench."
    gated = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}")
    bare = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}")
    broker = BoundedBroker(gated).start()
    plain = EmbeddedBroker(bare).start()
    paths = {"gate": gated.bootstrap_servers, "bare Tansu": bare.bootstrap_servers}
    samples: dict[str, list[float]] = {name: [] for name in paths}
    reads: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for n in range(args.rounds):
            for name, bootstrap in paths.items():  # alternating: same broker, same moment
                topic = topic_name(Topic.DELIVERY_LOCATIONS)
                samples[name] += round_trips(bootstrap, topic, args.records)
                seconds, read = catch_up(bootstrap, topic)
                reads[name].append(read / seconds)
                print(f"  round {n} {name}: {read} records read", flush=True)
        counted = broker.most_appended()
    finally:
        broker.stop()
        plain.stop()
    rows = {
        name: {
            "produce_p50_ms": round(percentile(s, 50) * 1000, 2),
            "produce_p99_ms": round(percentile(s, 99) * 1000, 2),
            "catch_up_records_per_s": round(sum(reads[name]) / len(reads[name])),
        }
        for name, s in samples.items()
    }
    result = {
        "machine": machine(),
        "params": vars(args),
        "paths": rows,
        "batches_counted_by_gate_busiest_partition": counted,
    }
    path = write_result("gate", result)
    print_table(
        f"Gate vs bare Tansu: {args.records} one-record produces x {args.rounds} rounds per path",
        [(n, str(r["produce_p50_ms"]), str(r["produce_p99_ms"]), str(r["catch_up_records_per_s"]))
         for n, r in rows.items()],
        header=("path", "produce p50 ms", "produce p99 ms", "catch-up records/s"),
    )  # fmt: skip
    print("  written to", path)


if __name__ == "__main__":
    main()

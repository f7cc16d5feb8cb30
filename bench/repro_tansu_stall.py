"""Minimal reproduction of the embedded broker's stall, and what its fetch waits cost.

Against a bare Tansu (started as :class:`embedded.broker.EmbeddedBroker` does, on a
free port), with the project's clients (``contract.kafka``: lz4, idempotent producer,
assign()-based consumers). Three experiments, each a sub-command (default: all):

* ``stall``: a partition filled with N record batches; a reader positioned at its last
  record, with ``fetch.wait.max.ms`` W, either gets it or gets nothing at all. Then a
  sustained run: a producer at a constant rate and two followers (W=5 ms, W=100 ms)
  tailing the same partition; lag sampled every second, librdkafka ``debug=fetch,broker``
  of the W=5 follower kept in ``bench/results/<result>.rdkafka-w5.log``.
* ``early``: does a waiting fetch return when data arrives before its max wait? One record
  produced at a random moment while a follower waits; arrival latency per W.
* ``idle``: broker CPU with idle followers (9 partitions each) per W.
* ``shared``: head-of-line blocking. A busy topic (3 partitions of N single-record
  batches, ``--busy-rate`` records a second still arriving) and a quiet one; a record produced
  to the quiet topic, timed ack -> received by a reader that follows both topics in one
  consumer (as the push bridge does) and by one that follows the quiet topic alone.

Why (docs/broker.md): this build lists every stored batch of the partition on each fetch
that has data to return, and stops listing when the fetch's max wait is used up; a reader
then gets an empty answer, without an error, for as long as the partition only grows.

Run: ``nice .venv/bin/python -m bench.repro_tansu_stall [stall|early|idle]``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.common import RESULTS, arguments, free_port, machine, percentile, print_table
from contract import kafka
from contract.conf import KafkaConfig
from embedded.broker import EmbeddedBroker

VALUE = json.dumps(
    {
        "order_id": 10000123,
        "courier_id": 42,
        "lat": 52.370216,
        "lon": 4.895168,
        "status": "IN_TRANSIT",
        "at": "2026-11-24T12:00:00.000000+00:00",
    }
).encode()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


class Bare:
    """A Tansu on a free port, its log kept, plus the project's client settings."""

    def __init__(self, log_path: Path) -> None:
        self.config = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}")
        self.broker = EmbeddedBroker(self.config, log_path=log_path).start(create_topics=False)
        self.bootstrap = self.config.bootstrap_servers

    @property
    def pid(self) -> int:
        assert self.broker.process is not None
        return self.broker.process.pid

    def topic(self, name: str, partitions: int = 1) -> None:
        admin = kafka.admin(self.config)
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result()

    def producer(self, **overrides: object) -> Producer:
        return kafka.producer(self.config, **overrides)

    def consumer(self, wait_ms: int, **overrides: object) -> Consumer:
        """The project's consumer, with the fetch wait as given."""
        return kafka.consumer(
            self.config, **{"group.id": "repro", "fetch.wait.max.ms": wait_ms, **overrides}
        )

    def stop(self) -> None:
        self.broker.stop()


def fill(prod: Producer, topic: str, count: int) -> None:
    batch = kafka.Deliveries(prod)
    for _ in range(count):
        batch.produce(topic, None, VALUE)
    batch.flush(60)


def first_record_ms(
    bare: Bare, topic: str, offset: int, wait_ms: int, give_up: float
) -> float | None:
    """Milliseconds until a reader assigned at ``offset`` gets a record (None: nothing)."""
    cons = bare.consumer(wait_ms)
    try:
        cons.assign([TopicPartition(topic, 0, offset)])
        started = time.monotonic()
        while time.monotonic() - started < give_up:
            for msg in cons.consume(10, timeout=0.05):
                if msg.error() is None:
                    return round((time.monotonic() - started) * 1000, 1)
        return None
    finally:
        cons.close()


def list_offsets_ms(bare: Bare, topic: str) -> tuple[float, int]:
    cons = bare.consumer(5)
    try:
        started = time.monotonic()
        _, high = cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
        return round((time.monotonic() - started) * 1000, 1), high
    finally:
        cons.close()


def stall_by_size(bare: Bare, sizes: list[int], waits: list[int]) -> list[dict]:
    """A partition of N single-record batches; can a reader at its last record read it?"""
    bare.topic("by-size")
    prod = bare.producer(**{"linger.ms": 0, "batch.num.messages": 1})
    rows, stored = [], 0
    for size in sizes:
        fill(prod, "by-size", size - stored)
        stored = size
        listed_ms, listed_end = list_offsets_ms(bare, "by-size")
        row = {
            "batches": size,
            "broker_rss_mib": bare.broker.rss_mb(),
            "list_offsets_ms": listed_ms,
            "listed_end": listed_end,
            "first_record_ms_by_wait": {
                w: first_record_ms(bare, "by-size", size - 1, w, give_up=3.0) for w in waits
            },
            "first_record_ms_from_offset_0_wait_5": first_record_ms(
                bare, "by-size", 0, 5, give_up=3.0
            ),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


class Follower(threading.Thread):
    """An assign()-based reader tailing partition 0 from offset 0, counting records."""

    def __init__(self, bare: Bare, topic: str, wait_ms: int, debug_log: Path | None) -> None:
        super().__init__(daemon=True)
        overrides: dict[str, object] = {}
        if debug_log is not None:
            logger = logging.getLogger(f"rdkafka-w{wait_ms}")
            logger.propagate = False
            handler = logging.FileHandler(debug_log, mode="w")
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
            overrides = {"debug": "fetch,broker", "logger": logger}
        self.cons = bare.consumer(wait_ms, **overrides)
        self.topic = topic
        self.next_offset = 0
        self.stop = threading.Event()

    def run(self) -> None:
        self.cons.assign([TopicPartition(self.topic, 0, 0)])
        while not self.stop.is_set():
            for msg in self.cons.consume(1000, timeout=0.1):
                if msg.error() is None:
                    self.next_offset = msg.offset() + 1
                elif msg.error().code() != KafkaError._PARTITION_EOF:
                    print("follower error:", msg.error(), flush=True)
        self.cons.close()


def sustained(bare: Bare, rate: int, seconds: float, preload: int, debug_log: Path) -> dict:
    """Producer at ``rate`` records/s (project settings: linger 5 ms) and two followers."""
    bare.topic("sustained")
    fill(bare.producer(**{"linger.ms": 0, "batch.num.messages": 1}), "sustained", preload)
    prod = bare.producer()
    followers = {
        5: Follower(bare, "sustained", 5, debug_log),
        100: Follower(bare, "sustained", 100, None),
    }
    for f in followers.values():
        f.start()
    produced, acked = 0, [preload]

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[0] = max(acked[0], msg.offset() + 1)

    samples = []
    started = time.monotonic()
    next_sample = started + 1
    cpu0 = cpu_seconds(bare.pid)
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while produced < due:
            kafka.produce(prod, "sustained", None, VALUE, on_delivery)
            produced += 1
        prod.poll(0.002)
        if time.monotonic() >= next_sample:
            next_sample += 1
            sample = {
                "t": round(time.monotonic() - started),
                "end": acked[0],
                "lag_w5": acked[0] - followers[5].next_offset,
                "lag_w100": acked[0] - followers[100].next_offset,
                "broker_cpu_s": round(cpu_seconds(bare.pid) - cpu0, 2),
            }
            samples.append(sample)
            print(json.dumps(sample), flush=True)
    prod.flush(30)
    for f in followers.values():
        f.stop.set()
        f.join(5)
    stalled_at = next(
        (
            s["t"]
            for s in samples
            if s["lag_w5"] > rate
            and all(t["lag_w5"] >= s["lag_w5"] for t in samples if t["t"] >= s["t"])
        ),
        None,
    )
    return {
        "rate_per_s": rate,
        "preloaded_batches": preload,
        "samples": samples,
        "w5_lag_grows_from_s": stalled_at,
        "w5_final_lag": samples[-1]["lag_w5"] if samples else None,
        "w100_final_lag": samples[-1]["lag_w100"] if samples else None,
    }


def early_return(bare: Bare, waits: list[int], samples: int) -> dict:
    """Arrival latency of one record produced while a follower waits at the end."""
    bare.topic("early")
    prod = bare.producer()
    out = {}
    for wait in waits:
        cons = bare.consumer(wait)
        cons.assign([TopicPartition("early", 0, OFFSET_END)])
        latencies = []
        for _ in range(samples):
            # Drain, then let the reader sit in a long-poll for a random part of its wait.
            while cons.consume(100, timeout=0.05):
                pass
            time.sleep(0.3 + random.random() * wait / 1000)
            sent = time.monotonic()
            one = kafka.Deliveries(prod)
            one.produce("early", None, VALUE)
            one.flush(5)
            acked = time.monotonic()
            got = None
            while got is None and time.monotonic() - sent < 5:
                for msg in cons.consume(1, timeout=0.05):
                    if msg.error() is None:
                        got = time.monotonic()
            if got is not None:
                latencies.append((got - acked) * 1000)
        cons.close()
        out[wait] = {
            "samples": len(latencies),
            "after_ack_ms_p50": round(percentile(latencies, 50), 1),
            "after_ack_ms_p99": round(percentile(latencies, 99), 1),
            "after_ack_ms_max": round(max(latencies), 1) if latencies else None,
        }
        print(wait, json.dumps(out[wait]), flush=True)
    return out


def idle_cost(bare: Bare, waits: list[int], followers: int, seconds: float) -> dict:
    """Broker CPU (cores) with ``followers`` idle readers of 3 topics x 3 partitions."""
    topics = [f"idle-{i}" for i in range(3)]
    for t in topics:
        bare.topic(t, partitions=3)
    batch = kafka.Deliveries(bare.producer())
    for t in topics:
        for p in range(3):
            batch.produce(t, None, VALUE, partition=p)
    batch.flush(10)
    out: dict[str, float] = {}
    cpu0 = cpu_seconds(bare.pid)
    time.sleep(seconds)
    out["no_clients"] = round((cpu_seconds(bare.pid) - cpu0) / seconds, 3)
    for wait in waits:
        readers = []
        for _ in range(followers):
            cons = bare.consumer(wait)
            cons.assign([TopicPartition(t, p, OFFSET_END) for t in topics for p in range(3)])
            readers.append(cons)
        stop = threading.Event()

        def poll(cons: Consumer, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                cons.consume(100, timeout=0.1)

        threads = [threading.Thread(target=poll, args=(c,), daemon=True) for c in readers]
        for t in threads:
            t.start()
        time.sleep(2)
        cpu0 = cpu_seconds(bare.pid)
        time.sleep(seconds)
        out[f"wait_{wait}ms"] = round((cpu_seconds(bare.pid) - cpu0) / seconds, 3)
        stop.set()
        for t in threads:
            t.join()
        for c in readers:
            c.close()
        print(wait, out[f"wait_{wait}ms"], flush=True)
    return out


def shared_reader(
    bare: Bare, sizes: list[int], samples: int, busy_rate: float, wait_ms: int = 100
) -> list[dict]:
    """A quiet topic's record behind a busy topic's listings, per busy-partition size."""
    bare.topic("busy", 3)
    bare.topic("quiet", 3)
    prod = bare.producer(**{"linger.ms": 0, "batch.num.messages": 1})
    stop = threading.Event()

    def trickle() -> None:  # every fetch then has busy partitions to list
        while not stop.wait(1 / busy_rate):
            prod.produce("busy", None, VALUE, partition=random.randrange(3))
            prod.poll(0)

    rows, stored = [], 0
    for size in sizes:
        for partition in range(3):
            batch = kafka.Deliveries(prod)
            for _ in range(size - stored):
                batch.produce("busy", None, VALUE, partition=partition)
            batch.flush(120)
        stored = size
        stop.clear()
        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        readers = {
            "both topics": bare.consumer(wait_ms),
            "quiet topic alone": bare.consumer(wait_ms),
        }
        readers["both topics"].assign(
            [TopicPartition(t, p, OFFSET_END) for t in ("busy", "quiet") for p in range(3)]
        )
        readers["quiet topic alone"].assign(
            [TopicPartition("quiet", p, OFFSET_END) for p in range(3)]
        )
        latencies: dict[str, list[float]] = {name: [] for name in readers}
        got: dict[str, float] = {}

        def follow(name: str, cons: Consumer, got: dict[str, float] = got) -> None:
            while not stop.is_set():
                for msg in cons.consume(1000, timeout=0.05):
                    if msg.error() is None and msg.topic() == "quiet":
                        got[name] = time.monotonic()

        threads = [
            threading.Thread(target=follow, args=item, daemon=True) for item in readers.items()
        ]
        for t in threads:
            t.start()
        time.sleep(2)  # both readers at the end, fetching
        for _ in range(samples):
            time.sleep(0.2 + random.random() * 0.3)
            got.clear()
            one = kafka.Deliveries(prod)
            one.produce("quiet", None, VALUE)
            one.flush(5)
            acked = time.monotonic()
            deadline = acked + 5
            while len(got) < len(readers) and time.monotonic() < deadline:
                time.sleep(0.005)
            for name in readers:
                if name in got:
                    latencies[name].append((got[name] - acked) * 1000)
        stop.set()
        for t in [*threads, feeder]:
            t.join(5)
        for cons in readers.values():
            cons.close()
        row = {
            "busy_batches_per_partition": size,
            **{
                name: {
                    "received": len(v),
                    "p50_ms": round(percentile(v, 50), 1),
                    "p99_ms": round(percentile(v, 99), 1),
                    "max_ms": round(max(v), 1) if v else None,
                }
                for name, v in latencies.items()
            },
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("what", nargs="*", default=["stall", "early", "idle", "shared"])
    parser.add_argument("--sizes", default="1000,5000,10000,20000,40000,80000,160000")
    parser.add_argument("--waits", default="5,20,100,500")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--preload", type=int, default=10000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--followers", type=int, default=4)
    parser.add_argument("--shared-sizes", default="0,5000,10000,20000")
    parser.add_argument("--busy-rate", type=float, default=300, help="records/s to the busy topic")
    parser.add_argument("--note", default="", help="stored with the result (e.g. a shared machine)")
    args = parser.parse_args()
    waits = [int(w) for w in args.waits.split(",")]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"tansu-stall-{stamp}"
    RESULTS.mkdir(exist_ok=True)
    result: dict = {"machine": machine(), "note": args.note}
    if "stall" in args.what:
        bare = Bare(RESULTS / f"{name}.broker.log")
        try:
            result["by_size"] = stall_by_size(bare, [int(s) for s in args.sizes.split(",")], waits)
            result["sustained"] = sustained(
                bare, args.rate, args.seconds, args.preload, RESULTS / f"{name}.rdkafka-w5.log"
            )
        finally:
            bare.stop()
        print_table(
            "Reader at the last record of a partition of N batches: ms to its first record "
            "(- = nothing in 3 s)",
            [
                (
                    str(r["batches"]),
                    str(r["list_offsets_ms"]),
                    str(r["broker_rss_mib"]),
                    *(str(r["first_record_ms_by_wait"][w] or "-") for w in waits),
                )
                for r in result["by_size"]
            ],
            ("batches", "ListOffsets ms", "RSS MiB", *(f"wait {w} ms" for w in waits)),
        )
    if "early" in args.what:
        bare = Bare(RESULTS / f"{name}.early.broker.log")
        try:
            result["early"] = early_return(bare, waits, args.samples)
        finally:
            bare.stop()
    if "shared" in args.what:
        bare = Bare(RESULTS / f"{name}.shared.broker.log")
        try:
            result["shared"] = shared_reader(
                bare, [int(s) for s in args.shared_sizes.split(",")], args.samples, args.busy_rate
            )
        finally:
            bare.stop()
        print_table(
            "A quiet topic's record, ack -> received (ms), wait 100 ms, beside a busy topic of "
            "N batches per partition",
            [
                (
                    str(r["busy_batches_per_partition"]),
                    *(
                        f"{r[k]['p50_ms']} / {r[k]['p99_ms']} / {r[k]['max_ms']}"
                        for k in ("both topics", "quiet topic alone")
                    ),
                )
                for r in result["shared"]
            ],
            ("busy batches", "one consumer, both topics p50/p99/max", "quiet topic alone"),
        )
    if "idle" in args.what:
        bare = Bare(RESULTS / f"{name}.idle.broker.log")
        try:
            result["idle_broker_cores"] = idle_cost(bare, waits, args.followers, 10.0)
        finally:
            bare.stop()
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()

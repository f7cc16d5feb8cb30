"""How far behind each reader of the embedded broker is, every few seconds, at a load.

The embedded broker's rollover carries every record from the lowest position any reader
reports (``contract.positions``), so a reader that falls behind makes each rollover
longer, and every client waits at the gate meanwhile. This starts the whole embedded
system at ``--multiple`` x the book's peak, opens ``--sockets`` WebSockets (as the
operator, on the newest orders, so each web worker's push bridge runs), and prints, every
``--every`` seconds, each reader's records behind the end of each topic it reads (end
offset minus its reported position, summed over partitions). How the push bridge's lag at
10x was found: ``bench/results/bridge-positions-10x-20261126.log``.

Not a test. Usage::

    .venv/bin/python bench/reader_positions.py --multiple 10 --minutes 9 [--sockets 8]
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

TOPICS = ["orders_enriched", "delivery_locations", "delivery_statuses", "order_statuses"]


def hold_sockets(web_url: str, token: str, order_ids: list[int]) -> None:
    """Open one socket per order and read them until the process ends."""
    import websockets

    async def hold() -> None:
        sockets = [
            await websockets.connect(
                web_url.replace("http", "ws") + f"/ws/orders/{order_id}/",
                additional_headers={"Authorization": f"Token {token}"},
                max_queue=None,
            )
            for order_id in order_ids
        ]
        print("sockets open:", len(sockets), flush=True)

        async def drain(ws) -> None:
            async for _ in ws:
                pass

        await asyncio.gather(*(drain(ws) for ws in sockets), return_exceptions=True)

    threading.Thread(target=lambda: asyncio.run(hold()), daemon=True).start()


def behind_by_reader() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(records per topic, reader -> topic -> records behind the end)."""
    from contract import kafka
    from contract.conf import kafka_config
    from contract.positions import GroupOffsets, positions_by_reader, topic_ids

    client = kafka.admin()
    offsets = GroupOffsets(kafka_config())
    try:
        positions = positions_by_reader(client, topic_ids(client, TOPICS), offsets)
    finally:
        offsets.close()
    cons = kafka.consumer()
    try:
        ends = {topic: kafka.end_offsets(cons, topic) for topic in TOPICS}
    finally:
        cons.close()
    behind = {
        reader: {
            topic: sum(ends[topic].get(p, 0) - offset for p, offset in parts.items())
            for topic, parts in topics.items()
        }
        for reader, topics in positions.items()
    }
    return {topic: sum(parts.values()) for topic, parts in ends.items()}, behind


def main() -> None:
    parser = common.arguments(__doc__)
    common.add_multiple(parser, default=10)
    common.add_duration(parser, minutes=9, every=30, sampled="readings of the readers' positions")
    parser.add_argument("--sockets", type=int, default=8)
    args = parser.parse_args()
    supervisor, web_url, workdir = common.start_full_system(args.multiple)
    print("workdir", workdir, flush=True)
    try:
        from rest_framework.authtoken.models import Token

        from bench.bench_soak import wait_for_operator
        from tracker.orders.models import Order

        token = Token.objects.get_or_create(user=wait_for_operator())[0].key
        newest = list(Order.objects.order_by("-id").values_list("id", flat=True)[: args.sockets])
        hold_sockets(web_url, token, newest)
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.every)
            try:
                ends, behind = behind_by_reader()
            except Exception as exc:  # noqa: BLE001 - a sample, not the run
                print(f"t={time.monotonic() - t0:.0f}s sample failed: {exc}", flush=True)
                continue
            print(
                f"t={time.monotonic() - t0:.0f}s records={json.dumps(ends)} "
                f"behind={json.dumps(behind)}",
                flush=True,
            )
    finally:
        supervisor.stop()


if __name__ == "__main__":
    main()

"""What the push bridge costs per second of records at 10x the book's peak.

``--seconds`` of 10x records (about 1,100 courier points, 1,050 enriched versions and
35 statuses a second, the contract's own events) fed through ``Bridge.handle`` in polls
of 500, publishing through a real ``InMemoryChannelLayer`` with a few groups joined; the
process CPU per second of records, each case in a fresh process: ``every group`` (every
group counts as listening), ``in process`` (the bridge asks the layer who listens and
skips points nobody wants unparsed), ``in process + operator`` (the fleet wants every
point). Above one core the bridge cannot keep up at 10x on any machine.

    .venv/bin/python -m bench bridge --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import threading
import time

from bench import harness

POINTS, ENRICHED, STATUSES = 1100, 1050, 35
CASES = ("every group", "in process", "in process + operator")


def one(case: str, seconds: int) -> dict:
    """One case, in a process of its own (a fresh bridge, layer and JIT-free interpreter)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from channels.layers import InMemoryChannelLayer

    from contract.events import (
        DeliveryLocation,
        OrderEnriched,
        OrderItem,
        OrderStatusChanged,
        Topic,
        new_event_id,
        now_ms,
        topic_name,
    )
    from tracker.live import bridge as bridge_module
    from tracker.tracking import eta

    eta.current_statistics = lambda: eta.Statistics()  # no Pinot here: the default rates
    layer = InMemoryChannelLayer()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    groups = ["order.1005", "customer.3", "restaurant.2"]
    if case == "in process + operator":
        groups.append("operations")

    async def join() -> None:
        for group in groups:
            await layer.group_add(group, await layer.new_channel())

    asyncio.run_coroutine_threadsafe(join(), loop).result()

    def publish(sends: list) -> None:
        asyncio.run_coroutine_threadsafe(bridge_module.send_in_order(layer, sends), loop).result()

    if case == "every group":
        bridge = bridge_module.Bridge(publish)
    else:
        bridge = bridge_module.Bridge(publish, lambda group: bool(layer.groups.get(group)))
    rng, t = random.Random(1), now_ms()
    items = [
        OrderItem(product_id=i + 1, name="Paneer tikka", category="Mains", quantity=2,
                  unit_price="9.50")
        for i in range(3)
    ]  # fmt: skip

    def enriched(order_id: int, version: int) -> bytes:
        return OrderEnriched(
            event_id=new_event_id(), event_time=t, order_id=order_id,
            customer_id=order_id % 200 + 1, customer_name="Asha Rao",
            restaurant_id=order_id % 8 + 1, restaurant_name="Spice Route",
            restaurant_lat=12.97, restaurant_lon=77.59, delivery_lat=12.99, delivery_lon=77.61,
            items=items, version=version, item_count=6, total=28.5, status="OUT_FOR_DELIVERY",
            status_time=t - 60_000, created_at=t - 900_000, placed_order_at=t - 900_000,
            order_confirmed_at=t - 800_000, being_prepared_at=t - 700_000,
            being_cooked_at=t - 600_000, out_for_delivery_at=t - 60_000,
            courier_id=order_id % 60 + 1, courier_lat=12.98, courier_lon=77.6,
            location_time=t, distance_left_km=1.2,
        ).to_json()  # fmt: skip

    def point(order_id: int, second: int) -> bytes:
        return DeliveryLocation(
            event_id=new_event_id(), event_time=t + second * 1000, order_id=order_id,
            placed_at=t - 900_000, courier_id=order_id % 60 + 1,
            lat=12.98 + rng.random() / 100, lon=77.6,
        ).to_json()  # fmt: skip

    def status(order_id: int) -> bytes:
        return OrderStatusChanged(
            event_id=new_event_id(), event_time=t, order_id=order_id, placed_at=t - 900_000,
            status="ORDER_CONFIRMED", previous_status="PLACED_ORDER",
            customer_id=order_id % 200 + 1, restaurant_id=order_id % 8 + 1,
        ).to_json()  # fmt: skip

    locations = topic_name(Topic.DELIVERY_LOCATIONS)
    polls = []
    for second in range(seconds):
        records = [(Topic.DELIVERY_LOCATIONS, str(1000 + i).encode(), point(1000 + i, second))
                   for i in range(POINTS)]  # fmt: skip
        records += [(Topic.ORDERS_ENRICHED, str(1000 + i).encode(), enriched(1000 + i, second + 2))
                    for i in range(ENRICHED)]  # fmt: skip
        records += [(Topic.ORDER_STATUSES, b"", status(5000 + second * STATUSES + i))
                    for i in range(STATUSES)]  # fmt: skip
        rng.shuffle(records)
        polls += [records[k : k + 500] for k in range(0, len(records), 500)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for poll in polls:
        # What a reader (tracker/live/reader.py) does with a poll: skip what is not
        # wanted, hand on the rest.
        kept = [
            (topic, value)
            for topic, key, value in poll
            if bridge.worth_parsing(locations if topic is Topic.DELIVERY_LOCATIONS else topic, key)
        ]
        bridge.handle(kept, fleet=True)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "cpu_cores": round(cpu / seconds, 3),
        "wall_s_per_s": round(wall / seconds, 3),
        "messages": bridge.published,
        "records_per_s": POINTS + ENRICHED + STATUSES,
    }


OPTIONS = {"--seconds": 10}


def run(args: argparse.Namespace) -> dict:
    rows = [{"case": case, **harness.in_fresh_process(one, case, args.seconds)} for case in CASES]
    harness.print_table(
        f"Push bridge, {args.seconds} s of 10x records ({POINTS} points, {ENRICHED} enriched "
        f"versions, {STATUSES} statuses a second), polls of 500",
        [
            (r["case"], f"{r['cpu_cores']:.2f}", f"{r['wall_s_per_s']:.2f}", str(r["messages"]))
            for r in rows
        ],
        header=("case", "CPU cores", "wall s per s", "messages"),
    )
    return {"runs": rows}

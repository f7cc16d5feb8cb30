"""What the operators' fleet map costs: N couriers moving, each reporting a GPS point a
second, on the server (CPU of each process) and in the browser (frame time of the page).

The whole system runs with the simulator at ``--multiple`` x the book's peak; N synthetic
deliveries go on the road (an ``orders_enriched`` record each, then a point a second).
Three phases of ``--seconds``: idle with the operations page open, N couriers with it
open (Chromium measures its frames and the couriers drawn), N couriers with no operator.

    nice -n 10 .venv/bin/python -m bench fleet --couriers 1000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import threading
import time

from bench import harness

CENTRE = (12.9716, 77.5946)
#: Synthetic order ids, far above the simulator's.
FIRST_ORDER = 900_000_000

FRAME_SAMPLER = """(seconds) => new Promise((done) => {
  const intervals = [], long = [];
  const observer = new PerformanceObserver((list) => list.getEntries().forEach((e) => long.push(e.duration)));
  try { observer.observe({ type: "longtask", buffered: false }); } catch (e) {}
  let last = performance.now();
  const end = last + seconds * 1000;
  const frame = (now) => {
    intervals.push(now - last);
    last = now;
    if (now < end) requestAnimationFrame(frame);
    else { observer.disconnect(); done({ intervals, long }); }
  };
  requestAnimationFrame(frame);
})"""


class Couriers:
    """N deliveries on the road, each moving a few metres a second towards its door."""

    def __init__(self, count: int) -> None:
        from runtime import kafka

        self.count = count
        self.producer = kafka.producer()
        rng = random.Random(33)
        now = int(time.time() * 1000)
        self.rides = []
        for i in range(count):
            angle, km = rng.uniform(0, 2 * math.pi), rng.uniform(1, 8)
            start = (CENTRE[0] + rng.uniform(-0.08, 0.08), CENTRE[1] + rng.uniform(-0.08, 0.08))
            door = (start[0] + km / 111 * math.sin(angle), start[1] + km / 109 * math.cos(angle))
            picked_up = now - rng.randint(0, 20 * 60_000)
            self.rides.append((FIRST_ORDER + i, 1_000_000 + i, start, door, picked_up))
        self.stop = threading.Event()
        self.sent = 0

    def put_on_the_road(self) -> None:
        from contract.events import OrderEnriched, new_event_id
        from runtime import kafka

        placed = kafka.Deliveries(self.producer)
        for order_id, courier_id, start, door, picked_up in self.rides:
            placed.publish(
                OrderEnriched(
                    event_id=new_event_id(), event_time=picked_up, order_id=order_id, version=1,
                    customer_id=1, customer_name="Bench", restaurant_id=1, restaurant_name="Bench",
                    restaurant_lat=start[0], restaurant_lon=start[1], delivery_lat=door[0],
                    delivery_lon=door[1], items=[], item_count=0, total=10.0,
                    status="OUT_FOR_DELIVERY", status_time=picked_up, created_at=picked_up - 900_000,
                    placed_order_at=picked_up - 900_000, out_for_delivery_at=picked_up,
                    courier_id=courier_id, courier_lat=start[0], courier_lon=start[1],
                    location_time=picked_up,
                ),
            )  # fmt: skip
        placed.flush(30)

    def drive(self) -> None:
        """One point per courier per second until ``stop``, spread over the second."""
        from contract.events import DeliveryLocation, new_event_id
        from runtime import kafka

        points = kafka.Deliveries(self.producer)
        tick = 0
        while not self.stop.is_set():
            second = time.monotonic()
            tick += 1
            for index, (order_id, courier_id, start, door, picked_up) in enumerate(self.rides):
                share = min(1.0, tick / 600)  # ten minutes to the door
                lat = start[0] + (door[0] - start[0]) * share
                lon = start[1] + (door[1] - start[1]) * share
                now = int(time.time() * 1000)
                points.publish(
                    DeliveryLocation(
                        event_id=new_event_id(), event_time=now, order_id=order_id,
                        placed_at=picked_up - 900_000, courier_id=courier_id, lat=lat, lon=lon,
                    ),
                )  # fmt: skip
                self.sent += 1
                if index % 100 == 99:
                    self.producer.poll(0)
                    pause = second + (index + 1) / self.count - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
            self.producer.poll(0)
            left = second + 1 - time.monotonic()
            if left > 0:
                self.stop.wait(left)
        points.flush(10)


def cpu_by_component(supervisor) -> dict[str, float]:
    return harness.cpu_of(harness.pids_of(supervisor.children))


async def browser_phase(base: str, seconds: float, phases: list) -> dict:
    """Run ``phases`` (callables taking the page, returning a dict) with an operator signed in."""
    from playwright.async_api import async_playwright

    from tests.fixtures_browser import CHROMIUM, CHROMIUM_ARGS

    results = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = await (
            await browser.new_context(base_url=base, viewport={"width": 1280, "height": 900})
        ).new_page()
        await page.goto("/accounts/login/?next=/operations/")
        await page.get_by_label("Username").fill("operator")
        await page.get_by_label("Password").fill("ordertrack-demo")
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url("**/operations/")
        await page.locator("#fleet-map").scroll_into_view_if_needed()
        for name, phase in phases:
            results[name] = await phase(page)
        await browser.close()
    return results


def frames(sample: dict) -> dict:
    intervals = sample["intervals"][1:]
    return {
        "frames": len(intervals),
        "fps": len(intervals) / (sum(intervals) / 1000) if intervals else 0,
        "p50_ms": harness.percentile(intervals, 50),
        "p95_ms": harness.percentile(intervals, 95),
        "p99_ms": harness.percentile(intervals, 99),
        "max_ms": max(intervals, default=0),
        "over_50ms": sum(1 for i in intervals if i > 50),
        "long_tasks": len(sample["long"]),
        "long_task_ms": sum(sample["long"]),
    }


def measure(args: argparse.Namespace) -> dict:
    supervisor = harness.start_full_system(args.multiple)
    base = supervisor.web_url
    couriers = Couriers(args.couriers)
    result: dict = {"couriers": args.couriers, "seconds": args.seconds}
    try:
        time.sleep(args.warmup)
        driver = threading.Thread(target=couriers.drive, daemon=True)

        async def idle(page):
            before, t0 = cpu_by_component(supervisor), time.monotonic()
            sample = await page.evaluate(FRAME_SAMPLER, args.seconds)
            result["idle_cores"] = harness.cores(
                before, cpu_by_component(supervisor), time.monotonic() - t0
            )
            return frames(sample)

        async def moving(page):
            couriers.put_on_the_road()
            driver.start()
            await page.wait_for_function(
                f"() => document.getElementById('fleet-map').fleetMap.couriers.size >= {int(args.couriers * 0.95)}",
                timeout=60_000,
            )
            before, t0 = cpu_by_component(supervisor), time.monotonic()
            sent0 = couriers.sent
            sample = await page.evaluate(FRAME_SAMPLER, args.seconds)
            elapsed = time.monotonic() - t0
            result["moving_cores"] = harness.cores(before, cpu_by_component(supervisor), elapsed)
            result["points_per_second"] = (couriers.sent - sent0) / elapsed
            result["drawn"] = await page.evaluate(
                "() => document.getElementById('fleet-map').fleetMap.couriers.size"
            )
            result["summary"] = await page.locator("#fleet-summary").text_content()
            if args.screenshot:
                await page.locator("#fleet-map").screenshot(path=args.screenshot)
            sample = frames(sample)
            return sample

        result["frames"] = asyncio.run(
            browser_phase(base, args.seconds, [("idle", idle), ("moving", moving)])
        )
        # The operators' page closed: what the bridge costs with nobody watching the fleet.
        time.sleep(2)
        before, t0 = cpu_by_component(supervisor), time.monotonic()
        time.sleep(args.seconds)
        result["unwatched_cores"] = harness.cores(
            before, cpu_by_component(supervisor), time.monotonic() - t0
        )
    finally:
        couriers.stop.set()
        supervisor.stop()
    return result


OPTIONS = {
    "--couriers": 1000,
    "--seconds": (30.0, "seconds per phase"),
    "--multiple": harness.multiple(),
    "--warmup": 20.0,
    "--screenshot": ("", "save the fleet map here (PNG)"),
}


def run(args: argparse.Namespace) -> dict:
    result = measure(args)
    rows = [
        (name, f"{result['idle_cores'].get(name, 0):.2f}", f"{result['moving_cores'][name]:.2f}",
         f"{result['unwatched_cores'].get(name, 0):.2f}")
        for name in result["moving_cores"]
    ]  # fmt: skip
    harness.print_table(
        f"CPU (cores) with {args.couriers} couriers moving ({result['points_per_second']:.0f} points/s)",
        rows, header=("process", "idle", "moving, page open", "moving, no operator"),
    )  # fmt: skip
    rows = [
        (name, str(f["frames"]), f"{f['fps']:.1f}", f"{f['p50_ms']:.1f}", f"{f['p95_ms']:.1f}",
         f"{f['p99_ms']:.1f}", f"{f['max_ms']:.0f}", str(f["long_tasks"]), f"{f['long_task_ms']:.0f}")
        for name, f in result["frames"].items()
    ]  # fmt: skip
    harness.print_table(
        f"Operations page frames (Chromium headless; drawn: {result['drawn']} couriers)",
        rows, header=("phase", "frames", "fps", "p50 ms", "p95 ms", "p99 ms", "max ms", "long tasks", "long ms"),
    )  # fmt: skip
    print("  ", result["summary"])
    return result

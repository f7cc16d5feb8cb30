"""Notifications: a status accepted -> its push received and decrypted (issue 71's targets).

The push service is ``localrun.pushservice.PushService``, in this process: it checks each
request's VAPID signature and decrypts it as the browser would (RFC 8291). Every customer
has one subscription on it, written in bulk. Latency: from the payload's ``at`` (the status
event's time, taken by the order service just before its commit) to the decryption; a
moment not pushed ``--drain-seconds`` after the window is missing (infinitely late).

* ``--part latency``: ``make run``'s topology (its push service replaced by this one), the
  simulator at ``--level`` x the book's peak (contract/load.py) for the demo customers: the
  status changes are the simulator's. Once the level's GPS points/s are steady (capacity's
  settle, at most ``--settle-minutes``), ``--minutes`` measured, with the notifier's cores
  (its process tree's CPU time) and RSS. Goals: p99 <= 2 s; at 1x, notifier <= 0.05 cores.
* ``--part dead-endpoints``: Kafka, the relay and the notifier; ``--customers`` subscribed,
  ``--dead`` of them hung (the push service accepts the connection and never answers). The
  scenario's own open-loop driver makes ``--rate`` status changes a second (default 5x's)
  through the order services for ``--minutes``. Goal: p99 <= 2 s for the others; the
  notifier's RSS every ``--every`` s, flat (its slope, MiB a minute).

    flock /work/heavy.lock .venv/bin/python -m bench notifications --level 1
    flock /work/heavy.lock .venv/bin/python -m bench notifications --level 5
    flock /work/heavy.lock .venv/bin/python -m bench notifications --part dead-endpoints
"""

from __future__ import annotations

import argparse
import math
import random
import threading
import time
from collections import deque
from datetime import UTC, datetime

from bench import harness
from bench.scenarios import capacity
from contract.load import Load

GOAL_P99_S = 2.0
GOAL_CORES_1X = 0.05

OPTIONS = {
    "--part": ("latency", "latency or dead-endpoints"),
    "--level": (1.0, f"latency: the simulator's load, x the book's peak ({Load(1).describe()})"),
    "--minutes": (10.0, "minutes measured"),
    "--settle-minutes": (30.0, "latency: at most this long for the level's GPS points/s"),
    "--tolerance": (0.05, "latency: how close the GPS points/s must be to the level's"),
    "--customers": (10_000, "dead-endpoints: subscribed customers"),
    "--dead": (1_000, "dead-endpoints: of them, subscriptions that never answer"),
    "--rate": (Load(5).status_changes_per_second, "dead-endpoints: status changes a second"),
    "--every": (10.0, "seconds between samples of the notifier's RSS"),
    "--drain-seconds": (30.0, "after the window, how long a push may still arrive"),
}


class Pushes:
    """The push service and what it decrypted: (arrival, payload) by tag, first arrival."""

    def __init__(self) -> None:
        from localrun.pushservice import PushService
        from tracker.notifications import vapid

        self.service = PushService(vapid.public_key()).start()
        self.first: dict[str, tuple[float, dict]] = {}
        self.again = 0
        self.service.on_receive = self._take

    def _take(self, got) -> None:  # noqa: ANN001 - a pushservice.Received
        if got.payload["tag"] in self.first:
            self.again += 1
        else:
            self.first[got.payload["tag"]] = (time.time(), got.payload)

    def subscribe(self, users: list, dead: int = 0) -> None:
        """One subscription each, in bulk; the first ``dead`` of them hang."""
        from tracker.notifications.models import PushSubscription
        from tracker.notifications.services import seal_for

        rows = []
        for index, user in enumerate(users):
            name = f"u{user.pk}"
            keys = self.service.browser(name).keys()
            if index < dead:
                self.service.hung.add(name)
            rows.append(PushSubscription(user=user, endpoint=self.service.endpoint(name), label="bench",
                                         seal=seal_for(user), **keys))  # fmt: skip
        PushSubscription.objects.bulk_create(rows, batch_size=500)


class NotifierSampler(threading.Thread):
    """The notifier's process tree: (seconds, RSS MiB, CPU s) every ``every`` s."""

    def __init__(self, pid: int, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.t0 = pid, every, time.monotonic()
        self.samples: list[tuple[float, float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((round(time.monotonic() - self.t0, 1),
                                 round(harness.process_tree_rss(self.pid), 1),
                                 harness.process_tree_cpu(self.pid)))  # fmt: skip
            if self.done.wait(self.every):
                return

    def summary(self) -> dict:
        (t0, rss0, cpu0), (t1, rss1, cpu1) = self.samples[0], self.samples[-1]
        series = [(t, r) for t, r, _ in self.samples]
        return {"notifier_cores": round((cpu1 - cpu0) / max(t1 - t0, 1e-9), 4),
                "rss_mb_first": rss0, "rss_mb_last": rss1, "rss_mb_max": max(r for _, r in series),
                "rss_slope_mb_per_min": slope(series),
                "rss_slope_last_half_mb_per_min": slope(series[len(series) // 2 :]),
                "rss_series": series}  # fmt: skip


def slope(series: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB), in MiB a minute."""
    if len(series) < 2:
        return None
    mean_t = sum(t for t, _ in series) / len(series)
    mean_r = sum(r for _, r in series) / len(series)
    spread = sum((t - mean_t) ** 2 for t, _ in series)
    return round(60 * sum((t - mean_t) * (r - mean_r) for t, r in series) / spread, 2)


def expected(t0: float, t1: float, users: list) -> list[str]:
    """The tags of the moments the users' orders reached between ``t0`` and ``t1``."""
    from tracker.notifications.moments import MOMENT_OF_STATUS, tag
    from tracker.orders.models import OrderStatusChange

    mine = {user.pk for user in users}
    changes = OrderStatusChange.objects.filter(
        changed_at__gte=datetime.fromtimestamp(t0, UTC), changed_at__lte=datetime.fromtimestamp(t1, UTC),
        status__in=list(MOMENT_OF_STATUS),
    ).values_list("order_id", "status", "order__customer__user_id")  # fmt: skip
    return [tag(order, MOMENT_OF_STATUS[status]) for order, status, user in changes if user in mine]


def latencies(pushes: Pushes, tags: list[str], drain_s: float) -> dict:
    """Percentiles over the expected pushes, once all arrived or ``drain_s`` passed."""
    deadline = time.monotonic() + drain_s
    while any(t not in pushes.first for t in tags) and time.monotonic() < deadline:
        time.sleep(0.5)
    got = []
    for t in tags:
        if t in pushes.first:
            arrived, payload = pushes.first[t]
            at = datetime.fromisoformat(payload["at"].replace("Z", "+00:00")).timestamp()
            got.append(arrived - at)
    late = got + [math.inf] * (len(tags) - len(got))
    ms = {p: _ms(harness.percentile(late, p)) if late else None for p in (50, 90, 99)}
    return {"expected": len(tags), "received": len(got), "missing": len(tags) - len(got),
            "p50_ms": ms[50], "p90_ms": ms[90], "p99_ms": ms[99],
            "max_ms": _ms(max(late)) if late else None, "resends": pushes.again}  # fmt: skip


def _ms(seconds: float) -> float:
    """Milliseconds; a push that never came is infinitely late (JSON's ``Infinity``)."""
    return round(seconds * 1000) if math.isfinite(seconds) else math.inf


def missed(result: dict) -> list[str]:
    p99 = result["p99_ms"]
    return [] if p99 is not None and p99 <= GOAL_P99_S * 1000 else [f"p99 {p99} ms"]


def measured(pid: int, pushes: Pushes, args: argparse.Namespace, users: list, work) -> dict:  # noqa: ANN001
    """``work()`` (a dict) with the notifier ``pid`` sampled throughout; then the pushes of
    the moments that ``users``' orders reached meanwhile, and the status changes a second."""
    from tracker.orders.models import OrderStatusChange

    sampler = NotifierSampler(pid, args.every)
    t0 = time.time()
    sampler.start()
    done = work()
    t1 = time.time()
    sampler.done.set()
    sampler.join()
    since = OrderStatusChange.objects.filter(changed_at__gte=datetime.fromtimestamp(t0, UTC))
    return {**latencies(pushes, expected(t0, t1, users), args.drain_seconds),
            "status_changes_per_s": round(since.count() / (t1 - t0), 2), **done,
            **sampler.summary(), "window": (t0, t1)}  # fmt: skip


def part_latency(args: argparse.Namespace) -> dict:
    from django.contrib.auth import get_user_model

    from localrun.components import components

    level, users = Load(args.level), []

    def subscribe_demo_customers() -> None:
        users.extend(get_user_model().objects.filter(customer__isnull=False))
        pushes.append(Pushes())
        pushes[0].subscribe(users)

    pushes: list[Pushes] = []
    names = [c.name for c in components() if c.name != "pushservice"]  # ours replaces it
    env = {**harness.simulator_env(level.multiple), "WEBPUSH_ALLOW_LOCAL": "true"}
    launched = harness.start(names, env=env, seed=True, prepare=subscribe_demo_customers)
    try:
        steady = capacity.settle(level, args)
        hold = lambda: {"stopped_early": harness.STOP.wait(args.minutes * 60)}  # noqa: E731
        result = measured(launched.pid("notifier"), pushes[0], args, users, hold)
    finally:
        launched.stop()
        pushes[0].service.stop()
    result |= {"level": level.describe(), "source": "the simulator", "subscribed": len(users),
               "asked_status_changes_per_s": round(level.status_changes_per_second, 2), **steady}  # fmt: skip
    result["missed"] = missed(result)
    if level.multiple <= 1 and result["notifier_cores"] > GOAL_CORES_1X:
        result["missed"].append(f"notifier {result['notifier_cores']} cores")
    return result


def drive(rate: float, seconds: float, customers: list) -> dict:
    """Open loop: every 1/``rate`` s one status change through the order services: a new
    order (one in 6.9 changes, as in contract/load.py), else a random order in flight moved
    to its next status. A change that comes late is made at once (the backlog counts)."""
    from contract.events import OrderStatus
    from contract.load import STATUS_CHANGES_PER_ORDER
    from tracker.orders import services
    from tracker.orders.policy import SYSTEM
    from tracker.restaurants.models import Restaurant

    rng = random.Random(7)
    restaurant = Restaurant.objects.filter(is_open=True).order_by("id").first()
    items = [services.ItemRequest(restaurant.products.filter(is_available=True).first().pk, 1)]
    queue, in_flight = deque(customers), []
    made = behind = 0
    start = time.monotonic()
    while (due := start + made / rate) < start + seconds and not harness.STOP.is_set():
        time.sleep(max(0.0, due - time.monotonic()))
        behind = max(behind, time.monotonic() - due)
        if not in_flight or rng.random() < 1 / STATUS_CHANGES_PER_ORDER:
            customer, address = queue[0]
            queue.rotate(-1)
            order, _ = services.place_order(
                customer=customer, restaurant=restaurant, items=items, delivery_address=address.line1,
                delivery_lat=address.lat, delivery_lon=address.lon,
            )  # fmt: skip
            in_flight.append(order.pk)
        else:
            index = rng.randrange(len(in_flight))
            order = services.advance_order(in_flight[index], by=SYSTEM, via="bench")
            if order.status == OrderStatus.DELIVERED:
                in_flight[index] = in_flight[-1]
                in_flight.pop()
        made += 1
    return {"changes": made, "driver_behind_max_s": round(behind, 3)}


def part_dead(args: argparse.Namespace) -> dict:
    from django.db.models import Count

    users, turns, pushes = [], [], []

    def subscribe_customers() -> None:
        from tracker.customers.models import Address

        made = harness.bench_customers(args.customers, "bench-notify")
        users.extend(customer.user for customer, _ in made)
        pushes.append(Pushes())
        pushes[0].subscribe(users, dead=args.dead)  # the first --dead hang
        addresses = {a.customer_id: a for a in Address.objects.filter(is_default=True)}
        order = random.Random(3).sample(made, len(made))  # who orders next: the dead spread
        turns.extend((c, addresses[c.pk]) for c, _ in order)

    env = {"WEBPUSH_ALLOW_LOCAL": "true"}
    launched = harness.start(["kafka", "relay", "notifier"], env=env, seed=True,
                             prepare=subscribe_customers)  # fmt: skip
    service = pushes[0].service
    try:
        work = lambda: drive(args.rate, args.minutes * 60, turns)  # noqa: E731
        result = measured(launched.pid("notifier"), pushes[0], args, users[args.dead :], work)
        from tracker.notifications.models import Delivery

        log = dict(Delivery.objects.values_list("state").annotate(n=Count("id")))
        dead_moments = len(expected(*result["window"], users[: args.dead]))
    finally:
        launched.stop()
        service.stop()
    hung = sum(n for name, n in service.requests.items() if name in service.hung)
    result |= {"asked_status_changes_per_s": round(args.rate, 2), "source": "the scenario's driver",
               "subscribed": args.customers, "dead": args.dead, "dead_moments": dead_moments,
               "hung_requests": hung, "delivery_log": log}  # fmt: skip
    result["missed"] = missed(result)
    return result


def run(args: argparse.Namespace) -> dict:
    harness.stop_on_signals()
    if args.part not in ("latency", "dead-endpoints"):
        raise SystemExit("--part: latency or dead-endpoints")
    result = part_latency(args) if args.part == "latency" else part_dead(args)
    rows = [(k, str(v)) for k, v in result.items() if k not in ("rss_series", "window", "missed")]
    rows.append(("goals", "; ".join(result["missed"]) or "held"))
    what = result.get("level") or f"{args.customers:,} customers, {args.dead:,} dead"
    harness.print_table(f"Notifications, {args.part}: {what}, {args.minutes:g} min", rows)
    return {**result, "goals": {"p99_s": GOAL_P99_S, "notifier_cores_1x": GOAL_CORES_1X},
            "label": f"{args.level:g}x" if args.part == "latency" else args.part,
            "failed": bool(result["missed"])}  # fmt: skip

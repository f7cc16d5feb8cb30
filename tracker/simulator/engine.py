"""The business simulator: customers order, kitchens cook, couriers ride.

It drives the system only through the domain services (``place_order``,
``advance_order``, ``cancel_order``, ``record_locations``), exactly like the API
does, so a demo exercises the real outbox, relay, broker and stream job.

Time comes from a :class:`Clock`. With :class:`RealClock` the simulation
sleeps between actions (``make run``); with :class:`VirtualClock` it runs as
fast as the database allows with event times on a virtual timeline (tests,
reprocessing demos). With the same seed and clock start the sequence of
actions is identical, which :attr:`Simulation.log` records.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.utils import timezone

from contract import geo
from contract.events import CANCELLABLE_STATUSES, OrderStatus
from contract.load import BOOK_PEAK_ORDERS_PER_MINUTE
from tracker.couriers.models import Courier
from tracker.customers.models import Address
from tracker.notifications.selectors import notified_customer_ids
from tracker.orders import services
from tracker.orders.models import Order
from tracker.orders.policy import SYSTEM
from tracker.restaurants.models import Product, Restaurant

log = logging.getLogger(__name__)

#: Seconds an order waits in each status before the kitchen moves it on (at pace 1).
KITCHEN_WAITS: dict[OrderStatus, tuple[float, float]] = {
    OrderStatus.PLACED_ORDER: (5, 20),
    OrderStatus.ORDER_CONFIRMED: (10, 40),
    OrderStatus.BEING_PREPARED: (30, 90),
    OrderStatus.BEING_COOKED: (60, 180),
    OrderStatus.ARRIVING_AT_DOOR: (20, 60),
}
#: Kitchen load by local hour of day (multiplies kitchen waits): lunch and dinner rushes.
KITCHEN_LOAD_BY_HOUR = (
    0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.9, 1.0, 1.0, 1.0, 1.1, 1.3,  # 00-11
    1.6, 1.5, 1.2, 1.0, 1.0, 1.1, 1.3, 1.6, 1.7, 1.4, 1.1, 0.9,  # 12-23
)  # fmt: skip
#: Traffic by local hour of day (multiplies courier speed): morning and evening rush.
TRAFFIC_BY_HOUR = (
    1.25, 1.3, 1.3, 1.3, 1.25, 1.2, 1.0, 0.8, 0.65, 0.7, 0.85, 0.95,  # 00-11
    0.9, 0.9, 0.95, 0.95, 0.85, 0.7, 0.6, 0.65, 0.8, 0.95, 1.1, 1.2,  # 12-23
)  # fmt: skip


def kitchen_pace(restaurant_id: int) -> float:
    """How slow one restaurant's kitchen is (0.6-1.6 x the waits above): a fixed draw per
    restaurant, the same in every run, so a kitchen keeps its character."""
    return random.Random(f"kitchen-{restaurant_id}").uniform(0.6, 1.6)


class Clock(Protocol):
    """Where the simulation's time comes from."""

    def now(self) -> datetime: ...

    def sleep_until(self, moment: datetime) -> None: ...


class RealClock:
    """Wall-clock time: actions happen when they are due."""

    def now(self) -> datetime:
        return timezone.now()

    def sleep_until(self, moment: datetime) -> None:
        delay = (moment - timezone.now()).total_seconds()
        if delay > 0:
            time.sleep(delay)


class VirtualClock:
    """A clock that jumps to the next action instead of sleeping."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def sleep_until(self, moment: datetime) -> None:
        self._now = max(self._now, moment)


@dataclass(frozen=True)
class SimConfig:
    #: The level of load (contract/load.py states it in orders, statuses and points).
    orders_per_minute: float = BOOK_PEAK_ORDERS_PER_MINUTE
    #: Divides kitchen waits; travel is at courier speed in the hour's traffic, never paced.
    pace: float = 1.0
    cancel_rate: float = 0.03
    gps_interval: float = 1.0
    arrive_radius_km: float = 0.15
    max_lines: int = 4
    #: Most recent actions kept in :attr:`Simulation.log` (None: all, for replays and tests;
    #: 0: none, for a simulator running for days, whose memory would otherwise grow with
    #: every action until the window is full).
    log_limit: int | None = None
    #: Courier speed factor for every hour (None: the hour's, ``TRAFFIC_BY_HOUR``). A ride's
    #: length in points follows it, so benchmarks pin it (``contract.load.REFERENCE_TRAFFIC``)
    #: to carry the same points an order at any hour.
    traffic: float | None = None


@dataclass
class Transit:
    """An order on the road: its courier, the waypoints to the door and when the ride started."""

    order: Order
    courier: Courier
    waypoints: list[tuple[float, float]]
    started: datetime
    seconds: float
    arriving: bool = False


#: Seconds before an action the database could not take is tried again.
DB_RETRY_SECONDS = 1.0


@dataclass(order=True)
class _Action:
    when: datetime
    seq: int
    kind: str = field(compare=False)
    order_id: int | None = field(compare=False, default=None)


class Simulation:
    """Customers, kitchens and couriers acting on a clock, through the same services as real
    users.

    Actions (place an order, advance one, post a GPS point) wait in a time-ordered queue; a
    :class:`RealClock` runs them live (``make run``), a :class:`VirtualClock` as fast as
    possible (tests, benchmarks). Kitchens are slower or faster by restaurant and busier at
    lunch and dinner; couriers ride street-like paths.
    """

    def __init__(self, rng: random.Random, config: SimConfig, clock: Clock) -> None:
        self.rng = rng
        self.config = config
        self.clock = clock
        self._queue: list[_Action] = []
        self._t0 = clock.now()
        self._seq = 0
        self.transits: dict[int, Transit] = {}
        self.log: deque[tuple] = deque(maxlen=config.log_limit)
        #: Order ids differ between databases; the log names orders by placement number.
        self._order_number: dict[int, int] = {}
        self.stats = {"placed": 0, "advanced": 0, "cancelled": 0, "delivered": 0, "points": 0}
        self.addresses = list(Address.objects.order_by("id").select_related("customer__user"))
        self._addresses_of: dict[int, list[Address]] = {}
        for address in self.addresses:
            self._addresses_of.setdefault(address.customer_id, []).append(address)
        #: Placement number at which each notified customer orders next (:meth:`_who`).
        self._turn_of: dict[int, int] = {}
        self.restaurants = list(Restaurant.objects.filter(is_open=True).order_by("id"))
        menu: dict[int, list[Product]] = {}
        for product in Product.objects.filter(is_available=True).order_by("id"):
            menu.setdefault(product.restaurant_id, []).append(product)
        self.menu = menu
        if not self.addresses or not self.restaurants:
            raise RuntimeError("no demo data: run `manage.py simulate --seed-only` first")

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, delay: float, kind: str, order_id: int | None = None) -> None:
        self._seq += 1
        when = self.clock.now() + timedelta(seconds=delay)
        heapq.heappush(self._queue, _Action(when, self._seq, kind, order_id))

    def _hour(self) -> int:
        return timezone.localtime(self.clock.now()).hour

    def _wait(self, status: OrderStatus, restaurant_id: int | None = None) -> float:
        """Seconds in ``status``: in a kitchen (``restaurant_id``), as slow as that kitchen
        is and as busy as the hour makes it."""
        low, high = KITCHEN_WAITS[status]
        wait = self.rng.uniform(low, high) / self.config.pace
        if restaurant_id is not None:
            wait *= kitchen_pace(restaurant_id) * KITCHEN_LOAD_BY_HOUR[self._hour()]
        return wait

    def _record(self, kind: str, order_id: int | None = None, *detail: object) -> None:
        if self.log.maxlen == 0:
            return
        number = self._order_number.get(order_id) if order_id is not None else None
        self.log.append(
            (round((self.clock.now() - self._t0).total_seconds(), 3), kind, number, *detail)
        )

    def resume_open_orders(self) -> int:
        """Pick up orders a previous run left unfinished, so none is stranded."""
        count = 0
        for order in Order.objects.active().order_by("id"):
            status = OrderStatus(order.status)
            if status in (OrderStatus.OUT_FOR_DELIVERY, OrderStatus.ARRIVING_AT_DOOR):
                self._start_transit(order)
            if status is not OrderStatus.OUT_FOR_DELIVERY:
                self._schedule(self.rng.uniform(0, 5), "advance", order.pk)
            count += 1
        return count

    # ------------------------------------------------------------------ actions

    def _who(self) -> Address:
        """Where the next order goes. Customers who hear about their orders (a phone
        subscribed to push, or email on: in ``make run``, the push service's demo phones)
        may have a person watching, so each orders with the first placement after they
        appear, then once in every as many placements as there are customers: as often as
        anyone on average, but without a gap of chance. The others are drawn at random.
        Only who orders is chosen here; how many is the load's (``contract.load``)."""
        placed = self.stats["placed"]
        for customer_id in sorted(notified_customer_ids() & self._addresses_of.keys()):
            turn = self._turn_of.setdefault(customer_id, placed)
            if placed >= turn:
                self._turn_of[customer_id] = placed + len(self._addresses_of)
                return self.rng.choice(self._addresses_of[customer_id])
        return self.rng.choice(self.addresses)

    def place_one(self) -> Order:
        address = self._who()
        nearest = sorted(
            self.restaurants,
            key=lambda r: geo.haversine_km(r.lat, r.lon, address.lat, address.lon),
        )[:2]
        restaurant = self.rng.choice(nearest)
        products = self.menu[restaurant.pk]
        lines = self.rng.sample(
            products, k=min(len(products), self.rng.randint(1, self.config.max_lines))
        )
        items = [
            services.ItemRequest(product_id=p.pk, quantity=self.rng.choice((1, 1, 1, 2, 2, 3)))
            for p in lines
        ]
        order, _ = services.place_order(
            customer=address.customer,
            restaurant=restaurant,
            items=items,
            delivery_address=f"{address.line1}, {address.city}",
            delivery_lat=address.lat,
            delivery_lon=address.lon,
            at=self.clock.now(),
        )
        self.stats["placed"] += 1
        if self.log.maxlen != 0:
            self._order_number[order.pk] = self.stats["placed"]
        self._record(
            "place",
            order.pk,
            address.pk,
            restaurant.pk,
            [(i.product_id, i.quantity) for i in items],
        )
        self._schedule(self._wait(OrderStatus.PLACED_ORDER, restaurant.pk), "advance", order.pk)
        return order

    def _advance(self, order_id: int) -> None:
        status = OrderStatus(Order.objects.values_list("status", flat=True).get(pk=order_id))
        if status in CANCELLABLE_STATUSES and self.rng.random() < self.config.cancel_rate / 4:
            services.cancel_order(order_id, by=SYSTEM, via="simulator", at=self.clock.now())
            self.stats["cancelled"] += 1
            self._record("cancel", order_id)
            return
        order = services.advance_order(order_id, by=SYSTEM, via="simulator", at=self.clock.now())
        self.stats["advanced"] += 1
        new_status = OrderStatus(order.status)
        self._record("advance", order_id, new_status.value)
        if new_status is OrderStatus.OUT_FOR_DELIVERY:
            self._start_transit(order)
        elif new_status is OrderStatus.DELIVERED:
            self.stats["delivered"] += 1
            self.transits.pop(order_id, None)
        elif new_status is not OrderStatus.ARRIVING_AT_DOOR:
            self._schedule(self._wait(new_status, order.restaurant_id), "advance", order_id)

    def _start_transit(self, order: Order) -> None:
        order = Order.objects.select_related("restaurant", "courier").get(pk=order.pk)
        start = (order.restaurant.lat, order.restaurant.lon)
        end = (order.delivery_lat, order.delivery_lon)
        # Streets are not straight lines: ride one leg along each axis.
        corner = (start[0], end[1]) if self.rng.random() < 0.5 else (end[0], start[1])
        waypoints = [start, corner, end]
        km = sum(geo.haversine_km(*a, *b) for a, b in zip(waypoints, waypoints[1:], strict=False))
        self.transits[order.pk] = Transit(
            order=order,
            courier=order.courier,
            waypoints=waypoints,
            started=self.clock.now(),
            # the hour's traffic, and each ride a little faster or slower than the next
            seconds=max(km / self._speed_kmh() * 3600, 30.0),
            arriving=OrderStatus(order.status) is OrderStatus.ARRIVING_AT_DOOR,
        )

    def _speed_kmh(self) -> float:
        traffic = self.config.traffic or TRAFFIC_BY_HOUR[self._hour()]
        return geo.COURIER_SPEED_KMH * traffic * self.rng.uniform(0.85, 1.15)

    def _position(self, transit: Transit, now: datetime) -> tuple[float, float]:
        fraction = min((now - transit.started).total_seconds() / transit.seconds, 1.0)
        legs = list(zip(transit.waypoints, transit.waypoints[1:], strict=False))
        lengths = [geo.haversine_km(*a, *b) for a, b in legs]
        total = sum(lengths) or 1.0
        travelled = fraction * total
        for (a, b), length in zip(legs, lengths, strict=False):
            if travelled <= length or (a, b) == legs[-1]:
                lat, lon = geo.interpolate(*a, *b, travelled / length if length else 1.0)
                break
            travelled -= length
        if fraction < 1.0:  # GPS noise of a few metres, never past the door
            lat += self.rng.gauss(0, 0.00003)
            lon += self.rng.gauss(0, 0.00003)
        return round(lat, 6), round(lon, 6)

    def _gps_tick(self) -> None:
        now = self.clock.now()
        positions = []
        for order_id in sorted(list(self.transits)):
            transit = self.transits[order_id]
            lat, lon = self._position(transit, now)
            positions.append(services.LocationPoint(transit.order, transit.courier, lat, lon, now))
            left = geo.haversine_km(lat, lon, *transit.waypoints[-1])
            if not transit.arriving and left <= self.config.arrive_radius_km:
                transit.arriving = True
                try:
                    transit.order = services.advance_order(
                        order_id, by=SYSTEM, via="simulator", at=now
                    )
                except services.OrderError as exc:  # an operator changed it meanwhile
                    log.info("simulator: order %s not advanced: %s", order_id, exc)
                    self.transits.pop(order_id)
                    continue
                self.stats["advanced"] += 1
                self._record("advance", order_id, transit.order.status)
                self._schedule(self._wait(OrderStatus.ARRIVING_AT_DOOR), "advance", order_id)
        if positions:
            try:
                self.stats["points"] += services.record_locations(positions)
            except services.TelemetryError as exc:
                # Telemetry is best effort by design; the next tick sends fresher points.
                log.warning("simulator: GPS points not acknowledged: %s", exc)
        self._record(
            "gps", None, [(self._order_number.get(p.order.pk), p.lat, p.lon) for p in positions]
        )
        self._schedule(self.config.gps_interval, "gps")

    # ------------------------------------------------------------------ loop

    def _next_arrival(self) -> float:
        return self.rng.expovariate(self.config.orders_per_minute / 60.0)

    def run(
        self, *, duration: float | None = None, max_orders: int | None = None, stop=None
    ) -> dict:
        """Run until ``duration`` seconds of simulated time, ``max_orders``, or ``stop`` is set."""
        end = self.clock.now() + timedelta(seconds=duration) if duration is not None else None
        if self.config.orders_per_minute > 0:
            self._schedule(self._next_arrival(), "place")
        self._schedule(self.config.gps_interval, "gps")
        last_report = time.monotonic()
        while self._queue and not (stop is not None and stop.is_set()):
            action = heapq.heappop(self._queue)
            if end is not None and action.when > end:
                break
            self.clock.sleep_until(action.when)
            try:
                if action.kind == "place":
                    if max_orders is None or self.stats["placed"] < max_orders:
                        self.place_one()
                        self._schedule(self._next_arrival(), "place")
                elif action.kind == "advance":
                    if (
                        action.order_id not in self.transits
                        or self.transits[action.order_id].arriving
                    ):
                        self._advance(action.order_id)
                elif action.kind == "gps":
                    self._gps_tick()
            except services.OrderError as exc:
                log.info("simulator: %s refused: %s", action.kind, exc)
            except (OperationalError, InterfaceError) as exc:
                # The database is unreachable (restarting, failing over): the action goes
                # back in its place and the simulation waits before trying again, as people
                # would; it outlives the outage instead of ending the system it drives.
                self.stats["postponed"] = self.stats.get("postponed", 0) + 1
                log.warning("simulator: %s postponed, database unreachable: %s", action.kind, exc)
                connection.close()
                heapq.heappush(self._queue, action)
                time.sleep(DB_RETRY_SECONDS)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                lag = (timezone.now() - action.when).total_seconds()
                log.info(
                    "simulator: %s in transit=%d lag=%.1fs",
                    " ".join(f"{k}={v}" for k, v in self.stats.items()),
                    len(self.transits),
                    max(lag, 0.0) if isinstance(self.clock, RealClock) else math.nan,
                )
                close_old_connections()
        return dict(self.stats)

"""What a process keeps of read data: orders' placed parts, couriers' names, trails.

Each is read from its store the first time a process is asked for it and kept in a
small least-recently-used map. Names and owners change only through the admin (or a
shell), whose saves are announced to every process (:mod:`tracker.tracking.invalidation`);
a process drops the copies a notice touches, and trusts copies only while its notice
listener is reading. Trails only grow, so a kept trail is right for as long as the
order's state shows its last position.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from contract.events import now_ms
from tracker.notices import listener
from tracker.tracking import selectors
from tracker.tracking.selectors import records
from tracker.tracking.shapes import Millis, PlacedOrder, Point

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` entries; the least recently read goes first. Web servers serve
    requests on several threads, hence the lock (held only for the dict operations)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def drop_where(self, doomed: Callable[[K, V], bool]) -> None:
        """Drop every entry for which ``doomed(key, value)`` is true (a scan: for rare
        events such as an admin edit)."""
        with self._lock:
            for key in [k for k, v in self._items.items() if doomed(k, v)]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


#: Orders whose placed part a process keeps (a few KB each), couriers whose name it keeps,
#: and trails it keeps (a position is about 100 bytes; a trail at most 1,000 of them).
PLACED_ORDERS_KEPT = 10_000
COURIER_NAMES_KEPT = 2_000
TRAILS_KEPT = 500

_placed: BoundedCache[int, PlacedOrder] = BoundedCache(PLACED_ORDERS_KEPT)
_courier_names: BoundedCache[int, str] = BoundedCache(COURIER_NAMES_KEPT)
_trails: BoundedCache[tuple[int, Millis], tuple[Point, ...]] = BoundedCache(TRAILS_KEPT)

#: Raised by every drop, so a copy read from the database before a change committed is
#: not kept after that change's notice has been handled.
_generation = 0
_generation_lock = threading.Lock()  # a check-then-keep never straddles a drop


def _copies_trusted() -> tuple[bool, int]:
    """Whether copies may be used and kept now (this process's notice listener is reading
    the notices), and the generation a new copy belongs to."""
    return listener.healthy(), _generation


def _keep_unless_invalidated(cache: BoundedCache, key: Any, value: Any, generation: int) -> None:
    """Keep a copy read during ``generation``, unless a notice invalidated copies since."""
    with _generation_lock:
        if generation == _generation:
            cache.put(key, value)


def _invalidate(cache: BoundedCache, matching: Any = None, key: Any = None) -> None:
    """Drop the copy under ``key``, or those ``matching(key, copy)``, or all of them; and
    start a new generation, so a copy read before this is not kept after it."""
    global _generation
    with _generation_lock:
        _generation += 1
        if key is not None:
            cache.pop(key)
        elif matching is not None:
            cache.drop_where(matching)
        else:
            cache.clear()


listener.subscribe(
    "copies.customer", lambda pk: _invalidate(_placed, lambda _, p: p.customer.id == pk)
)
listener.subscribe(
    "copies.restaurant", lambda pk: _invalidate(_placed, lambda _, p: p.restaurant.id == pk)
)
listener.subscribe(
    "copies.product",
    lambda pk: _invalidate(_placed, lambda _, p: any(i.product_id == pk for i in p.items)),
)
listener.subscribe("copies.courier", lambda pk: _invalidate(_courier_names, key=pk))
listener.on_resync(lambda: (_invalidate(_placed), _invalidate(_courier_names)))


def placed_order(order_id: int) -> PlacedOrder | None:
    """The order's placed part (None when there is no such order), from the database the
    first time this process is asked for it. Order ids are never reused (orders are not
    deleted); who may see the order is still decided on every read."""
    trusted, generation = _copies_trusted()
    placed = _placed.get(order_id) if trusted else None
    if placed is None:
        placed = records.placed_order(order_id)
        if placed is not None and trusted:
            _keep_unless_invalidated(_placed, order_id, placed, generation)
    return placed


def courier_name(courier_id: int) -> str | None:
    """A courier's display name (None for an id the database does not know)."""
    trusted, generation = _copies_trusted()
    name = _courier_names.get(courier_id) if trusted else None
    if name is None:
        name = records.courier_name(courier_id)
        if name is not None and trusted:
            _keep_unless_invalidated(_courier_names, courier_id, name, generation)
    return name


#: An ended order's positions are all in Pinot this long after its last record.
SETTLED_MS = 60_000


def trail(order_id: int, last_at: Millis, *, ended_at: Millis | None = None) -> tuple[Point, ...]:
    """The order's courier trail up to its current position (taken at ``last_at``). A
    trail that ends there is kept under it, and read again once the state moves on. An
    order that ended (``ended_at``) :data:`SETTLED_MS` ago gets no more points, so its
    trail is kept as it is (its last point may be older than the state's position, when
    that position was never stored as a point)."""
    key = (order_id, last_at)
    points = _trails.get(key)
    if points is None:
        points = tuple(Point(p.lat, p.lon, p.at) for p in selectors.courier_path(order_id))
        settled = ended_at is not None and now_ms() - ended_at > SETTLED_MS
        if points and (points[-1].at == last_at or settled):
            _trails.put(key, points)
    return points


def forget_copies() -> None:
    """Drop every per-process copy (tests, whose databases reuse order ids)."""
    _placed.clear()
    _courier_names.clear()
    _trails.clear()

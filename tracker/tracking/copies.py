"""What a process keeps of read data: orders' placed parts, couriers' names, trails, and
orders' states while the version register says they are current.

Each is read from its store the first time a process is asked for it and kept in a
small least-recently-used map. Names and owners change only through the admin (or a
shell), whose saves are announced to every process (:mod:`tracker.tracking.invalidation`);
a process drops the copies a notice touches, and trusts copies only while its notice
listener is reading. Trails only grow, so a kept trail is right for as long as the
order's state shows its last position. A kept state is right while no newer version
is registered by a live push bridge run (:mod:`tracker.tracking.versions`, whose reader
this module is).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.core.cache import caches
from prometheus_client import Counter

from contract.events import now_ms
from tracker.notices import listener
from tracker.tracking import selectors, versions
from tracker.tracking.selectors import OrderState, records
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
    trusted, generation = listener.healthy(), _generation
    placed = _placed.get(order_id) if trusted else None
    if placed is None:
        placed = records.placed_order(order_id)
        if placed is not None and trusted:
            _keep_unless_invalidated(_placed, order_id, placed, generation)
    return placed


def courier_name(courier_id: int) -> str | None:
    """A courier's display name (None for an id the database does not know)."""
    trusted, generation = listener.healthy(), _generation
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


#: Orders whose last state a process keeps (a state is about 2 KB).
STATES_KEPT = 20_000
_states: BoundedCache[int, OrderState] = BoundedCache(STATES_KEPT)

#: Where each read of an order's state came from: what Pinot's share of reads costs
#: depends on it (docs/operations.md §4.7), and a drop in ``kept`` is the first sign of
#: a stalled push bridge or an unreachable register.
STATE_READS = Counter(
    "ordertrack_order_state_reads_total",
    "Reads of an order's state, by source: kept (unchanged since this process's last "
    "read), else Pinot, because a newer version is registered (changed), this process "
    "kept no copy (not_kept), no version is registered (unregistered), or no live bridge "
    "run answered (unknown)",
    ["source"],
)
for _source in ("kept", "changed", "not_kept", "unregistered", "unknown"):
    STATE_READS.labels(_source)  # every series from the start, at 0, for rate()


def registered(order_id: int) -> tuple[str | None, int | None]:
    """(the live bridge run, the newest version it registered for ``order_id``) in the
    version register (:mod:`tracker.tracking.versions`): no run when none has beaten
    lately or the register cannot be read, no version when that run registered none.
    Only the run that beat last is consulted: each run keeps its own entries, so what a
    stopped run registered (it may have missed records while it was down) never counts,
    and never stands in the way of what the live run or a read registers."""
    register = caches["versions"]
    try:
        alive = register.get(versions.ALIVE_KEY)
        at = int(time.time() * 1000)  # wall clock: beats are compared across processes
        if alive is None or at - alive[1] > versions.ALIVE_MS:
            return None, None
        return alive[0], register.get(versions.ORDER_KEY.format(order_id, alive[0]))
    except Exception:  # noqa: BLE001 - unknown: ask Pinot
        return None, None


def order_state(order_id: int) -> OrderState | None:
    """The order's current state: the one kept from the last read while no newer version
    is registered, else Pinot's (:func:`selectors.order_state`), kept when it is at least
    the registered version.

    An order with no record since the bridge run started (delivered before it, say) has
    no version registered: the first read registers the one Pinot returned, if the
    bridge has not registered one meanwhile (``add``), so later reads skip Pinot too.
    A record the bridge read before that would have registered first; only an entry
    evicted between the bridge's write and Pinot's ingestion of that record (about a
    second) could let an older version in, until the order's next record."""
    run, latest = registered(order_id)
    kept = _states.get(order_id) if latest is not None else None
    if kept is not None and kept.version >= latest:
        STATE_READS.labels("kept").inc()
        return kept
    STATE_READS.labels(_why_pinot(run, latest, kept)).inc()
    state = selectors.order_state(order_id)
    if state is None or run is None:
        return state
    if latest is None:
        try:
            key = versions.ORDER_KEY.format(order_id, run)
            if caches["versions"].add(key, state.version, timeout=versions.KEPT_SECONDS):
                latest = state.version
        except Exception:  # noqa: BLE001 - unknown: the next read asks Pinot again
            return state
    if latest is not None and state.version >= latest:
        _states.put(order_id, state)
    return state


def _why_pinot(run: str | None, latest: int | None, kept: OrderState | None) -> str:
    if run is None:
        return "unknown"
    if latest is None:
        return "unregistered"
    return "not_kept" if kept is None else "changed"


def forget_copies() -> None:
    """Drop every per-process copy (tests, whose databases reuse order ids)."""
    _placed.clear()
    _courier_names.clear()
    _trails.clear()
    _states.clear()

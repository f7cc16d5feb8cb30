"""What a web process caches of read data: orders' placed parts, couriers' names, trails,
and orders' states while the version register says they are current.

Each is read from its store the first time a process is asked for it and cached in a
bounded map (:func:`tracker.cache.maps.bounded`). Names and owners change only through
the admin (or a shell), whose saves are announced to every process
(:mod:`tracker.cache.invalidation`); a process drops the entries a notice touches, and
trusts them only while its notice listener is reading. Trails only grow, so a cached
trail is right for as long as the order's state shows its last position. A cached state
is right while no newer version is registered (:mod:`tracker.cache.versions`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from cachetools import LRUCache
from prometheus_client import Counter

from contract.events import now_ms
from tracker.cache import versions
from tracker.cache.maps import LOCK, bounded
from tracker.notices import listener
from tracker.tracking import selectors
from tracker.tracking.selectors import OrderState, records
from tracker.tracking.shapes import Millis, PlacedOrder, Point

#: Orders whose placed part a process caches (a few KB each), couriers whose name it
#: caches, trails (a position is about 100 bytes; a trail at most 1,000 of them), and
#: orders' last states (about 2 KB each).
PLACED_ORDERS = 10_000
COURIER_NAMES = 2_000
TRAILS = 500
STATES = 20_000

_placed: LRUCache = bounded(PLACED_ORDERS)
_courier_names: LRUCache = bounded(COURIER_NAMES)
_trails: LRUCache = bounded(TRAILS)
_states: LRUCache = bounded(STATES)

#: Raised by every drop, so an entry read from the database before a change committed is
#: not cached after that change's notice has been handled.
_generation = 0


def _get(cache: LRUCache, key: Hashable) -> Any:
    with LOCK:
        return cache.get(key)


def _put(cache: LRUCache, key: Hashable, value: Any, generation: int | None = None) -> None:
    """Cache ``value``; with ``generation`` (when it was read), only if no notice dropped
    entries since."""
    with LOCK:
        if generation is None or generation == _generation:
            cache[key] = value


def drop(cache: LRUCache, matching: Callable[[Any, Any], bool] | None = None, key: Any = None):
    """Drop the entry under ``key``, or those ``matching(key, value)``, or all of them; and
    start a new generation, so a value read before this is not cached after it."""
    global _generation
    with LOCK:
        _generation += 1
        if key is not None:
            cache.pop(key, None)
        elif matching is not None:
            for doomed in [k for k, v in cache.items() if matching(k, v)]:
                del cache[doomed]
        else:
            cache.clear()


def drop_placed(matching: Callable[[PlacedOrder], bool] | None = None) -> None:
    """Drop the placed parts ``matching`` (all of them without it)."""
    drop(_placed, None if matching is None else lambda _, placed: matching(placed))


def drop_courier_name(courier_id: int | None = None) -> None:
    """Drop a courier's cached name (every one without ``courier_id``)."""
    drop(_courier_names, key=courier_id)


def placed_order(order_id: int) -> PlacedOrder | None:
    """The order's placed part (None when there is no such order), from the database the
    first time this process is asked for it. Order ids are never reused (orders are not
    deleted); who may see the order is still decided on every read."""
    trusted, generation = listener.healthy(), _generation
    placed = _get(_placed, order_id) if trusted else None
    if placed is None:
        placed = records.placed_order(order_id)
        if placed is not None and trusted:
            _put(_placed, order_id, placed, generation)
    return placed


def courier_name(courier_id: int) -> str | None:
    """A courier's display name (None for an id the database does not know)."""
    trusted, generation = listener.healthy(), _generation
    name = _get(_courier_names, courier_id) if trusted else None
    if name is None:
        name = records.courier_name(courier_id)
        if name is not None and trusted:
            _put(_courier_names, courier_id, name, generation)
    return name


#: An ended order's positions are all in Pinot this long after its last record.
SETTLED_MS = 60_000


def trail(order_id: int, last_at: Millis, *, ended_at: Millis | None = None) -> tuple[Point, ...]:
    """The order's courier trail up to its current position (taken at ``last_at``). A
    trail that ends there is cached under it, and read again once the state moves on. An
    order that ended (``ended_at``) :data:`SETTLED_MS` ago gets no more points, so its
    trail is cached as it is (its last point may be older than the state's position, when
    that position was never stored as a point)."""
    key = (order_id, last_at)
    points = _get(_trails, key)
    if points is None:
        points = tuple(Point(p.lat, p.lon, p.at) for p in selectors.courier_path(order_id))
        settled = ended_at is not None and now_ms() - ended_at > SETTLED_MS
        if points and (points[-1].at == last_at or settled):
            _put(_trails, key, points)
    return points


#: Where each read of an order's state came from: what Pinot's share of reads costs
#: depends on it (docs/operations.md §4.7), and a drop in ``cached`` is the first sign of
#: a stalled push bridge or an unreachable register.
STATE_READS = Counter(
    "ordertrack_order_state_reads_total",
    "Reads of an order's state, by source: cached (unchanged since this process's last "
    "read), else Pinot, because a newer version is registered (changed), this process "
    "cached none (not_cached), no version is registered (unregistered), or no live "
    "bridge run answered (unknown)",
    ["source"],
)
for _source in ("cached", "changed", "not_cached", "unregistered", "unknown"):
    STATE_READS.labels(_source)  # every series from the start, at 0, for rate()


def order_state(order_id: int) -> OrderState | None:
    """The order's current state: the one cached from the last read while no newer
    version is registered, else Pinot's (:func:`selectors.order_state`), cached when it is
    at least the registered version.

    An order with no record since the bridge run started (delivered before it, say) has
    no version registered: the first read registers the one Pinot returned, if the
    bridge has not registered one meanwhile (``add``), so later reads skip Pinot too.
    A record the bridge read before that would have registered first; only an entry
    evicted between the bridge's write and Pinot's ingestion of that record (about a
    second) could let an older version in, until the order's next record."""
    run, latest = versions.registered(order_id)
    cached = _get(_states, order_id) if latest is not None else None
    if cached is not None and cached.version >= latest:
        STATE_READS.labels("cached").inc()
        return cached
    STATE_READS.labels(_why_pinot(run, latest, cached)).inc()
    state = selectors.order_state(order_id)
    if state is None or run is None:
        return state
    if latest is None and versions.register_first(order_id, run, state.version):
        latest = state.version
    if latest is not None and state.version >= latest:
        _put(_states, order_id, state)
    return state


def _why_pinot(run: str | None, latest: int | None, cached: OrderState | None) -> str:
    if run is None:
        return "unknown"
    if latest is None:
        return "unregistered"
    return "not_cached" if cached is None else "changed"


def clear() -> None:
    """Drop every entry of this process (tests, whose databases reuse order ids)."""
    for cache in (_placed, _courier_names, _trails, _states):
        drop(cache)

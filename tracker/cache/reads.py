"""What a web process caches of read data, and the version register that says which
cached order states are current.

Orders' placed parts, couriers' names and trails are read from their store the first
time a process is asked for them and cached in bounded maps
(:func:`tracker.cache.maps.bounded`). Names and owners change only through the admin (or
a shell), whose saves are announced to every process (:mod:`tracker.cache.invalidation`);
a process drops the entries a notice touches, and trusts them only while its notice
listener is reading. Trails only grow, so a cached trail is right for as long as the
order's state shows its last position.

An order's state is cached while no newer version is registered. The version register
holds each order's newest orders_enriched version, as the push bridge read it, so a read
of an order that has not changed asks Pinot nothing; its writer (:class:`Registrar`) and
its reader (:func:`registered`, :func:`order_state`) are both here.

Pinot's cost is per query (docs/performance.md), and most reads of an order find what the
previous read found: an order changes a few times a minute, a client polls every few
seconds. The push bridge reads every orders_enriched record as it is written and
registers each order's newest version here; a read keeps the state Pinot last returned
and answers from it while no newer version is registered (:func:`order_state`).

The register is the ``versions`` cache: this process's memory in ``make run`` (each web
worker runs its own bridge), Redis in production (the ``pushbridge`` process writes,
the web workers read). Each bridge run writes its own entries and a heartbeat, and reads
consult only the run that beat last, within :data:`ALIVE_MS`: a stopped bridge, a
restarted one (which may have missed records while it was down: its new run starts with
no entries), an evicted key or an unreachable Redis all mean "unknown", never
"unchanged", and a read then asks Pinot.

Lists are registered too: for each list scope (:func:`scopes_of`: a customer's orders, a
restaurant's, every order) the newest change the run saw, ``(ms, order, version)``, so a
list's validator is known before Pinot is asked (:func:`scope_stamps`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from cachetools import LRUCache
from django.core.cache import caches
from prometheus_client import Counter

from contract.events import now_ms
from tracker.cache import outage
from tracker.cache.maps import LOCK, bounded
from tracker.notices import listener
from tracker.tracking import selectors
from tracker.tracking.selectors import OrderState, records
from tracker.tracking.shapes import Millis, PlacedOrder, Point

log = logging.getLogger(__name__)

#: A run's registrations count for this long after its last heartbeat.
ALIVE_MS = 5_000
#: The bridge beats at most this often (each beat is a write to the register).
BEAT_EVERY_MS = 1_000
#: A registered version outlives any state a process caches (a day; orders end sooner).
KEPT_SECONDS = 24 * 3600
#: The register's keys: ``order:<id>:<run>`` -> the newest version that run saw;
#: ``alive`` -> (run, ms, run's start ms) of the last run to beat;
#: ``scope:<scope>:<run>`` -> (ms, order, version): the newest change of a list's scope.
ORDER_KEY = "order:{}:{}"
ALIVE_KEY = "alive"
SCOPE_KEY = "scope:{}:{}"


def scopes_of(customer_id: int | None, restaurant_id: int | None) -> list[str]:
    """The list scopes an order's change shows in: its customer's, its restaurant's, all."""
    scopes = ["all"]
    if customer_id is not None:
        scopes.append(f"customer:{customer_id}")
    if restaurant_id is not None:
        scopes.append(f"restaurant:{restaurant_id}")
    return scopes


def now() -> int:
    """Wall-clock milliseconds: beats are compared across processes (Redis)."""
    return int(time.time() * 1000)


class Registrar:
    """One bridge run's writes to the register: each new version, and a heartbeat."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:12]
        self.started = now()
        self._beaten = 0
        self._lock = threading.Lock()

    def register(
        self, versions: Mapping[int, int], scopes: Mapping[str, tuple[int, int]] | None = None
    ) -> None:
        """Register ``versions`` (order -> newest version seen) and ``scopes`` (list scope
        -> its newest (order, version)), and beat when due. Called after every poll of
        orders_enriched, empty or not, so the beat stops when the reader does."""
        at = now()
        entries: dict[str, object] = {
            ORDER_KEY.format(order, self.run): version for order, version in versions.items()
        }
        for scope, (order, version) in (scopes or {}).items():
            entries[SCOPE_KEY.format(scope, self.run)] = (at, order, version)
        with self._lock:
            if at - self._beaten >= BEAT_EVERY_MS:
                entries[ALIVE_KEY] = (self.run, at, self.started)
                self._beaten = at
        if not entries:
            return
        try:
            caches["versions"].set_many(entries, timeout=KEPT_SECONDS)
        except Exception:  # noqa: BLE001 - readers then ask Pinot; the bridge must go on
            log.warning("versions: cannot register %d entries", len(entries), exc_info=True)


class Run(NamedTuple):
    """The bridge run that beat last: its id, and when it started (epoch ms)."""

    id: str
    started: int


def live_run() -> Run | None:
    """The bridge run that beat last, within :data:`ALIVE_MS` (None: unknown)."""
    try:
        alive = caches["versions"].get(ALIVE_KEY)
    except Exception:  # noqa: BLE001 - unknown: ask Pinot
        return None
    if alive is None or now() - alive[1] > ALIVE_MS:
        return None
    return Run(alive[0], alive[2] if len(alive) > 2 else 0)


def registered(order_id: int) -> tuple[str | None, int | None]:
    """(the live bridge run, the newest version it registered for ``order_id``): no run
    when none has beaten lately or the register cannot be read, no version when that run
    registered none. Only the run that beat last is consulted: each run keeps its own
    entries, so what a stopped run registered (it may have missed records while it was
    down) never counts, and never stands in the way of what the live run or a read
    registers."""
    run = live_run()
    if run is None:
        return None, None
    try:
        return run.id, caches["versions"].get(ORDER_KEY.format(order_id, run.id))
    except Exception:  # noqa: BLE001 - unknown: ask Pinot
        return None, None


Stamp = tuple[int, int, int]  # (ms seen, order, version)


def scope_stamps(scopes: Sequence[str]) -> tuple[Run, dict[str, Stamp | None]] | None:
    """(the live run, each scope's newest change it registered, None for none) or None
    when unknown."""
    run = live_run()
    if run is None:
        return None
    keys = {scope: SCOPE_KEY.format(scope, run.id) for scope in scopes}
    try:
        found = caches["versions"].get_many(keys.values())
    except Exception:  # noqa: BLE001 - unknown: build and hash
        return None
    return run, {scope: found.get(key) for scope, key in keys.items()}


def registered_many(order_ids: Iterable[int], run: str) -> dict[int, int] | None:
    """The versions ``run`` registered for ``order_ids`` (absent: none), None when unknown."""
    keys = {ORDER_KEY.format(order, run): order for order in order_ids}
    try:
        found = caches["versions"].get_many(keys)
    except Exception:  # noqa: BLE001
        return None
    return {keys[key]: version for key, version in found.items()}


def register_first(order_id: int, run: str, version: int) -> bool:
    """Register ``version`` as read from Pinot, unless the bridge registered one meanwhile
    (``add``); whether it is registered now."""
    try:
        return caches["versions"].add(ORDER_KEY.format(order_id, run), version, KEPT_SECONDS)
    except Exception:  # noqa: BLE001 - unknown: the next read asks Pinot again
        return False


# ---------------------------------------------------------------- the read cache

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


#: Until when (monotonic) the notice listener vouches for the entries above: it read the
#: notices lately (:func:`tracker.notices.listener.on_read`). Past it, ask the listener
#: (which starts it, and says whether it reads).
_trusted_until = 0.0


def trust_until(until: float) -> None:
    global _trusted_until
    _trusted_until = until


def _trusted() -> bool:
    return time.monotonic() < _trusted_until or listener.healthy()


def _read_through(cache: LRUCache, key: Hashable, load: Callable[[], Any]) -> Any:
    """The entry under ``key``, else ``load()``'s value (None: nothing), cached while the
    notice listener vouches for what is cached and no notice came during the load. While
    the database cannot be reached, the entry as long as :mod:`tracker.cache.outage`
    keeps answers (the listener heard every change until the outage began)."""
    trusted, generation = _trusted(), _generation
    value = _get(cache, key) if trusted else None
    if value is None:
        try:
            value = load()
        except outage.DATABASE_UNREACHABLE:
            value = _get(cache, key) if outage.riding() else None
            if value is None:
                raise
            return value
        if value is not None and trusted:
            _put(cache, key, value, generation)
    return value


def placed_order(order_id: int) -> PlacedOrder | None:
    """The order's placed part (None when there is no such order), from the database the
    first time this process is asked for it. Order ids are never reused (orders are not
    deleted); who may see the order is still decided on every read."""
    return _read_through(_placed, order_id, lambda: records.placed_order(order_id))


def courier_name(courier_id: int) -> str | None:
    """A courier's display name (None for an id the database does not know)."""
    return _read_through(_courier_names, courier_id, lambda: records.courier_name(courier_id))


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
#: depends on it (docs/operations.md §4.7), and a drop in ``kept`` is the first sign of
#: a stalled push bridge or an unreachable register.
STATE_READS = Counter(
    "ordertrack_order_state_reads_total",
    "Reads of an order's state, by source: kept (cached, unchanged since this process's "
    "last read), else Pinot, because a newer version is registered (changed), this "
    "process cached none (not_kept), no version is registered (unregistered), or no live "
    "bridge run answered (unknown)",
    ["source"],
)
for _source in ("kept", "changed", "not_kept", "unregistered", "unknown"):
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
    run, latest = registered(order_id)
    cached = _get(_states, order_id) if latest is not None else None
    if cached is not None and cached.version >= latest:
        STATE_READS.labels("kept").inc()
        return cached
    STATE_READS.labels(_why_pinot(run, latest, cached)).inc()
    state = selectors.order_state(order_id)
    if state is None or run is None:
        return state
    if latest is None and register_first(order_id, run, state.version):
        latest = state.version
    if latest is not None and state.version >= latest:
        _put(_states, order_id, state)
    return state


def _why_pinot(run: str | None, latest: int | None, cached: OrderState | None) -> str:
    if run is None:
        return "unknown"
    if latest is None:
        return "unregistered"
    return "not_kept" if cached is None else "changed"


def clear() -> None:
    """Drop every entry of this process (tests, whose databases reuse order ids)."""
    trust_until(0.0)
    for cache in (_placed, _courier_names, _trails, _states):
        drop(cache)

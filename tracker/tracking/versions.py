"""Which orders_enriched version of each order is the latest, so a read of an order that
has not changed asks Pinot nothing.

Pinot's cost is per query (docs/performance.md), and most reads of an order find what the
previous read found: an order changes a few times a minute, a client polls every few
seconds. The push bridge reads every orders_enriched record as it is written; it
registers each order's newest version here (:func:`register`), and a read keeps the
state Pinot last returned (:func:`order_state`), answering from it while no newer
version is registered.

The register is the ``versions`` cache: this process's memory in ``make run`` (each web
worker runs its own bridge), Redis in production (the ``pushbridge`` process writes,
the web workers read). It fails towards asking Pinot: a version counts only while the
bridge run that registered it is alive (its heartbeat at most :data:`ALIVE_MS` old), so
a stopped bridge, a restarted one (which may have missed records while down), an
evicted key or an unreachable Redis all mean "unknown", never "unchanged".
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping

from django.core.cache import caches

from contract.events import now_ms
from tracker.tracking import selectors
from tracker.tracking.copies import BoundedCache
from tracker.tracking.selectors import OrderState

log = logging.getLogger(__name__)

#: A run's registrations count for this long after its last heartbeat.
ALIVE_MS = 5_000
#: The bridge beats at most this often (each beat is a write to the register).
BEAT_EVERY_MS = 1_000
#: A registered version outlives any state a process keeps (a day; orders end sooner).
KEPT_SECONDS = 24 * 3600
#: Orders whose last state a process keeps (a state is about 2 KB).
STATES_KEPT = 20_000

_ALIVE_KEY = "alive"
_states: BoundedCache[int, OrderState] = BoundedCache(STATES_KEPT)


def _key(order_id: int) -> str:
    return f"order:{order_id}"


def _register():  # noqa: ANN202 - Django's cache handler, typed loosely by Django
    return caches["versions"]


class Registrar:
    """One bridge run's writes to the register: each new version, and a heartbeat."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:12]
        self._beaten = 0
        self._lock = threading.Lock()

    def register(self, versions: Mapping[int, int]) -> None:
        """Register ``versions`` (order -> newest version seen) and beat when due. Called
        after every poll of orders_enriched, empty or not, so the beat stops when the
        reader does."""
        now = now_ms()
        entries = {_key(order): (version, self.run) for order, version in versions.items()}
        with self._lock:
            if now - self._beaten >= BEAT_EVERY_MS:
                entries[_ALIVE_KEY] = entries[_alive_key(self.run)] = (self.run, now)
                self._beaten = now
        if not entries:
            return
        try:
            _register().set_many(entries, timeout=KEPT_SECONDS)
        except Exception:  # noqa: BLE001 - readers then ask Pinot; the bridge must go on
            log.warning("versions: cannot register %d entries", len(entries), exc_info=True)


def _alive_key(run: str) -> str:
    return f"{_ALIVE_KEY}:{run}"


def _lookup(order_id: int) -> tuple[str | None, int | None]:
    """(a live bridge run, the newest version a live run registered for ``order_id``): no
    run when none is alive or the register cannot be read, no version when no live run
    has registered one. Several runs may write at once (bridges restarting, a second
    ``pushbridge``): each entry names its run, and counts while that run beats."""
    register, now = caches["versions"], now_ms()
    try:
        got = register.get_many([f"order:{order_id}", _ALIVE_KEY])
        latest, entry = got.get(_ALIVE_KEY), got.get(f"order:{order_id}")
        if entry is not None and (latest is None or entry[1] != latest[0]):
            beat = register.get(f"{_ALIVE_KEY}:{entry[1]}")  # another run's entry
        else:
            beat = latest
    except Exception:  # noqa: BLE001 - unknown: ask Pinot
        return None, None
    run = latest[0] if latest is not None and now - latest[1] <= ALIVE_MS else None
    if entry is None or beat is None or now - beat[1] > ALIVE_MS:
        return run, None
    return run, entry[0]


def latest_version(order_id: int) -> int | None:
    """The newest version registered for ``order_id`` by the live bridge run, or None
    when it is unknown (no live run, nothing registered by it, the register down)."""
    return _lookup(order_id)[1]


def order_state(order_id: int) -> OrderState | None:
    """The order's current state: the one kept from the last read while no newer version
    is registered, else Pinot's (:func:`selectors.order_state`), kept when it is at
    least the registered version.

    An order with no record since the bridge run started (delivered before it, say) has
    no version registered: the first read registers the one Pinot returned, if the
    bridge has not registered one meanwhile (``add``), so later reads skip Pinot too.
    A record the bridge read before that would have registered first; only an entry
    evicted between the bridge's write and Pinot's ingestion of that record (about a
    second) could let an older version in, until the order's next record."""
    run, latest = _lookup(order_id)
    if latest is not None:
        kept = _states.get(order_id)
        if kept is not None and kept.version >= latest:
            return kept
    state = selectors.order_state(order_id)
    if state is None or run is None:
        return state
    if latest is None:
        try:
            if _register().add(_key(order_id), (state.version, run), timeout=KEPT_SECONDS):
                latest = state.version
        except Exception:  # noqa: BLE001 - unknown: the next read asks Pinot again
            return state
    if latest is not None and state.version >= latest:
        _states.put(order_id, state)
    return state


def forget() -> None:
    """Drop every kept state (tests, whose databases reuse order ids)."""
    _states.clear()

"""The version register: each order's newest orders_enriched version, as the push bridge
read it, so a read of an order that has not changed asks Pinot nothing. Its writer
(:class:`Registrar`) and its reader (:func:`registered`) are both here.

Pinot's cost is per query (docs/performance.md), and most reads of an order find what the
previous read found: an order changes a few times a minute, a client polls every few
seconds. The push bridge reads every orders_enriched record as it is written and
registers each order's newest version here; a read keeps the state Pinot last returned
and answers from it while no newer version is registered
(:func:`tracker.cache.reads.order_state`).

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
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from django.core.cache import caches

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

"""An order that has not changed is read without asking Pinot, and never served stale.

The push bridge registers each order's newest orders_enriched version
(:mod:`tracker.cache.reads`); a read caches the state Pinot last returned while no
newer version is registered (:func:`tracker.cache.reads.order_state`). The register counts only while the bridge run that wrote it
beats, so a stopped bridge, a new run or an unreadable register send reads to Pinot.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import caches

from tests.fixtures_pinot import order_event
from tests.waiting import wait_until
from tracker.cache import reads
from tracker.live.bridge import Bridge
from tracker.live.embedded import stop_embedded_bridge
from tracker.live.reader import run_readers
from tracker.tracking import selectors


def _version(order_id: int) -> int | None:
    return reads.registered(order_id)[1]


@pytest.fixture(autouse=True)
def _empty_register():
    """No bridge of an earlier test beating, an empty register, no kept states."""
    stop_embedded_bridge()
    caches["versions"].clear()
    reads.clear()
    yield
    caches["versions"].clear()
    reads.clear()


def test_a_version_counts_only_while_the_run_that_registered_it_beats(monkeypatch):
    old = reads.Registrar()
    old.register({7: 3})
    assert _version(7) == 3
    assert _version(8) is None  # nothing registered for it
    new = reads.Registrar()  # a restarted bridge: it may have missed records meanwhile
    new.register({})
    assert _version(7) is None
    new.register({7: 5})
    assert _version(7) == 5
    later = time.time() + (reads.ALIVE_MS + 1_000) / 1000
    monkeypatch.setattr(time, "time", lambda: later)
    assert _version(7) is None  # no heartbeat for longer than ALIVE_MS


def test_a_stopped_runs_entry_does_not_keep_a_read_from_registering(pinot, monkeypatch):
    """A restarted bridge starts a new run: what the stopped run registered is ignored,
    and the first read registers the version Pinot returns under the live run."""
    order = pinot.base + 3
    pinot.publish(order_event(order, 2, "DELIVERED"))
    pinot.sync()
    reads.Registrar().register({order: 1})  # a run that then stopped
    reads.Registrar().register({})  # the live run, which has seen nothing of it
    assert reads.order_state(order).version == 2
    assert _version(order) == 2


def test_an_unreadable_register_means_unknown_not_unchanged(monkeypatch):
    reads.Registrar().register({7: 3})

    def down(*args, **kwargs):
        raise ConnectionError("register down")

    monkeypatch.setattr(caches["versions"], "get", down)
    assert _version(7) is None


def _reads() -> dict[str, float]:
    """``ordertrack_order_state_reads_total`` by source, as /metrics shows it."""
    return {
        sample.labels["source"]: sample.value
        for metric in reads.STATE_READS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def _reads_since(before: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before[k]) for k, v in _reads().items() if v != before[k]}


@pytest.fixture
def bridge(pinot):
    """A push bridge following the run's topics, as the web workers run it."""
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=run_readers, args=(Bridge(lambda sends: None), stop, ready), daemon=True
    )
    thread.start()
    assert ready.wait(30), "the bridge did not start following its topics"
    yield stop
    stop.set()
    thread.join(15)


def test_an_unchanged_order_asks_pinot_once_and_a_new_version_is_read_again(
    pinot, bridge, monkeypatch
):
    order = pinot.base + 1
    asked = []
    real_order_state = selectors.order_state

    def counted(order_id):
        asked.append(order_id)
        return real_order_state(order_id)

    monkeypatch.setattr(selectors, "order_state", counted)
    pinot.publish(order_event(order, 1, "PLACED_ORDER"))
    pinot.sync()
    wait_until(lambda: _version(order) == 1, 20, "the bridge to register v1")
    before = _reads()
    for _ in range(5):
        assert reads.order_state(order).version == 1
    assert len(asked) == 1
    assert _reads_since(before) == {"not_kept": 1, "kept": 4}  # what operators see

    pinot.publish(order_event(order, 2, "ORDER_CONFIRMED"))
    wait_until(lambda: _version(order) == 2, 20, "the bridge to register v2")
    state = wait_until(
        lambda: (s := reads.order_state(order)) is not None and s.version == 2 and s,
        30,
        "the read to show v2 once Pinot has it",
        interval=0.05,
    )
    assert state.status == "ORDER_CONFIRMED"
    assert set(_reads_since(before)) == {"not_kept", "kept", "changed"}
    asked.clear()
    before = _reads()
    for _ in range(5):
        assert reads.order_state(order).version == 2
    assert asked == []
    assert _reads_since(before) == {"kept": 5}

    bridge.set()  # the bridge stops: after its last heartbeat, every read asks Pinot
    wait_until(lambda: _version(order) is None, 20, "the register to go stale")
    before = _reads()
    for _ in range(3):
        assert reads.order_state(order).version == 2
    assert len(asked) == 3
    assert _reads_since(before) == {"unknown": 3}


def test_an_order_with_no_record_since_the_bridge_started_is_registered_by_its_first_read(
    pinot, monkeypatch
):
    """A delivered order gets no records after the bridge starts: its first read registers
    the version Pinot returned (only where none is registered), so it is read once."""
    order = pinot.base + 2
    pinot.publish(order_event(order, 4, "DELIVERED"))
    pinot.sync()
    run = reads.Registrar()
    run.register({})  # a live run that has seen nothing of this order
    asked = []
    real_order_state = selectors.order_state
    monkeypatch.setattr(selectors, "order_state", lambda o: asked.append(o) or real_order_state(o))
    before = _reads()
    for _ in range(4):
        assert reads.order_state(order).version == 4
    assert len(asked) == 1
    assert _reads_since(before) == {"unregistered": 1, "kept": 3}
    assert _version(order) == 4

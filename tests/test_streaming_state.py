"""The driver-side state store: durable per batch, idempotent against Spark re-runs."""

from __future__ import annotations

import pytest

from streaming.state import DriverStateStore


def test_commit_survives_reopen_and_records_the_batch(tmp_path):
    path = tmp_path / "cp" / "driver-state.sqlite"
    store = DriverStateStore(path)
    assert store.last_batch_id == -1 and store.states == {}
    store.commit(0, {1: {"version": 1}, 2: {"version": 3}})
    store.commit(1, {1: {"version": 2}, 2: None})
    assert store.states == {1: {"version": 2}}
    store.close()

    reopened = DriverStateStore(path)
    assert reopened.last_batch_id == 1
    assert reopened.states == {1: {"version": 2}}
    reopened.close()


def test_failed_commit_changes_nothing(tmp_path):
    store = DriverStateStore(tmp_path / "s.sqlite")
    store.commit(0, {1: {"version": 1}})
    with pytest.raises(TypeError):
        store.commit(1, {2: {"bad": object()}})  # not JSON-serialisable
    assert store.last_batch_id == 0 and store.states == {1: {"version": 1}}
    store.close()
    assert DriverStateStore(tmp_path / "s.sqlite").last_batch_id == 0

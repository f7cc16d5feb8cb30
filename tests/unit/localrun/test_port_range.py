"""Which ports :mod:`localrun.ports` may choose from, given the kernel's ephemeral range
(no socket here: the choosing itself is tests/integration/localrun/test_ports.py)."""

from __future__ import annotations

import pytest

from localrun import ports


@pytest.fixture
def ephemeral(monkeypatch: pytest.MonkeyPatch):
    def set_range(low: int, high: int) -> None:
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (low, high))

    return set_range


def test_the_default_range_lies_below_this_kernels_ephemeral_range(monkeypatch) -> None:
    monkeypatch.delenv("ORDERTRACK_PORT_RANGE", raising=False)
    low, _ = ports.ephemeral_range()
    assert ports.reserved_range() == range(20000, 30000)
    assert ports.reserved_range().stop <= low


def test_a_configured_range_loses_the_part_the_kernel_hands_out(monkeypatch, ephemeral) -> None:
    ephemeral(25000, 60999)
    monkeypatch.setenv("ORDERTRACK_PORT_RANGE", "20000-29999")
    assert ports.reserved_range() == range(20000, 25000)
    monkeypatch.setenv("ORDERTRACK_PORT_RANGE", "59000-65000")
    assert ports.reserved_range() == range(61000, 65001)


def test_a_range_all_inside_the_ephemeral_one_is_refused(monkeypatch, ephemeral) -> None:
    ephemeral(1024, 65535)
    monkeypatch.delenv("ORDERTRACK_PORT_RANGE", raising=False)
    with pytest.raises(RuntimeError, match="ephemeral range 1024-65535"):
        ports.reserved_range()


def test_a_fixed_port_of_make_run_is_never_claimed(monkeypatch, ephemeral) -> None:
    ephemeral(32768, 60999)
    monkeypatch.setenv("ORDERTRACK_PORT_RANGE", "8000-8100")
    assert not ports.claim(8000)
    assert not ports.claim(8099)

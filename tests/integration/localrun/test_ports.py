"""The engines' ports (:mod:`localrun.ports`): outside the ephemeral range, one process's
each, and never one something already listens on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from localrun import ports
from runtime.conf import BASE_DIR

CHOOSE = (
    "import json, sys; from localrun.ports import free_port; "
    "print(json.dumps([free_port() for _ in range(20)]), flush=True); sys.stdin.read()"
)


def test_a_chosen_port_never_comes_from_the_ephemeral_range() -> None:
    low, high = ports.ephemeral_range()
    chosen = [ports.free_port() for _ in range(50)]
    assert not [port for port in chosen if low <= port <= high]
    assert len(set(chosen)) == len(chosen)


def test_two_processes_choosing_at_once_never_get_the_same_port(monkeypatch) -> None:
    # 45 ports for 2 x 20 choices: without the lock their scans would most often meet.
    monkeypatch.setenv("ORDERTRACK_PORT_RANGE", "23400-23444")
    choosers = [
        subprocess.Popen(
            [sys.executable, "-c", CHOOSE], cwd=BASE_DIR, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        for _ in range(2)
    ]  # fmt: skip
    try:
        first, second = (set(json.loads(c.stdout.readline())) for c in choosers)
    finally:
        for chooser in choosers:
            chooser.communicate("", timeout=30)  # both held their ports until now
    assert len(first) == len(second) == 20
    assert not first & second


def test_a_port_something_listens_on_is_skipped(monkeypatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # not ours to choose
        taken = listener.getsockname()[1]
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 1024))
        monkeypatch.setenv("ORDERTRACK_PORT_RANGE", f"{taken}-{taken}")
        with pytest.raises(RuntimeError, match="no free port left"):
            ports.free_port()
        assert not ports.claim(taken)

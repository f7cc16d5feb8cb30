"""No component outlives the supervisor: a hangup, SIGKILL or crash of it stops them all.

The supervisor here runs two components that each start a grandchild of their own the
way the Kafka and Pinot launchers start their JVMs (with the parent-death signal), in a
process group of its own, as ``make run`` does in a terminal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runtime.conf import BASE_DIR
from tests.waiting import wait_until

SUPERVISOR = textwrap.dedent(
    """
    import sys
    from localrun.components import Component
    from localrun.supervisor import Supervisor

    child = (
        "import subprocess, sys, time\\n"
        "from localrun.lifetime import die_with_parent\\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],\\n"
        "                     preexec_fn=die_with_parent())\\n"
        "print('grandchild', g.pid, flush=True)\\n"
        "print('up', flush=True)\\n"
        "time.sleep(600)\\n"
    )
    comps = [Component(name, [sys.executable, "-c", child], "up", stage)
             for name, stage in (("one", 0), ("two", 1))]
    supervisor = Supervisor(comps)
    supervisor.stop_on_signals()
    if supervisor.start(ready_message="all up"):
        while not supervisor.stopping.wait(0.5):
            pass
    supervisor.stop()
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def _descendant_pids(tmp_path: Path, proc: subprocess.Popen[str]) -> list[int]:
    """The components' and their grandchildren's pids, once all are up."""
    deadline = time.monotonic() + 30
    lines: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "all up" in line:
            break
    else:
        pytest.fail("the supervisor did not start its components: " + "".join(lines))
    # The components' own lines are in their logs (the console shows none during start-up).
    logs = [(tmp_path / "logs" / f"{name}.log").read_text() for name in ("one", "two")]
    grandchildren = [
        int(line.split("grandchild ")[1].split()[0])
        for log in logs
        for line in log.splitlines()
        if "grandchild " in line
    ]
    children = [  # of every thread: the supervisor starts them from one of its own
        int(p)
        for task in Path(f"/proc/{proc.pid}/task").iterdir()
        for p in (task / "children").read_text().split()
    ]
    assert len(children) == 2 and len(grandchildren) == 2, lines
    return children + grandchildren


def _run_supervisor(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR],
        cwd=BASE_DIR,
        env={**os.environ, "PYTHONPATH": str(BASE_DIR), "ORDERTRACK_VAR_DIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives `make run`
    )


def _wait_gone(pids: list[int], within: float) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.parametrize(
    "how",
    ["hangup to its process group", "SIGKILL of the supervisor", "SIGTERM of the supervisor"],
)
def test_no_component_outlives_the_supervisor(tmp_path, how):
    proc = _run_supervisor(tmp_path)
    try:
        pids = _descendant_pids(tmp_path, proc)
        if how.startswith("hangup"):
            os.killpg(proc.pid, signal.SIGHUP)
        elif how.startswith("SIGKILL"):
            proc.kill()
        else:
            proc.terminate()
        proc.wait(15)
        assert _wait_gone(pids, within=10) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_taken_port_is_reported_with_the_process_holding_it():
    from localrun.lifetime import port_holder

    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket, time; s = socket.socket(); "
         "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        found = port_holder(port)
        assert found.startswith(f"pid {holder.pid} ") and "socket" in found
    finally:
        holder.kill()
        holder.wait()


def test_a_held_component_stays_down_until_its_hold_file_goes(tmp_path, monkeypatch):
    """A drill kills a process and keeps it down (PostgreSQL for 20 s, a broker until
    later): no restart, no back-off, and no failure counted while ``hold/<name>`` exists."""
    import io

    from localrun.components import Component
    from localrun.supervisor import Supervisor

    monkeypatch.setenv("ORDERTRACK_VAR_DIR", str(tmp_path))
    child = "import time; print('up', flush=True); time.sleep(600)"
    supervisor = Supervisor([Component("one", [sys.executable, "-c", child], "up", 0)],
                            out=io.StringIO(), max_restarts=0)  # fmt: skip
    assert supervisor.start()
    try:
        (held,) = supervisor.children
        first = held.process.pid
        (tmp_path / "hold").mkdir()
        (tmp_path / "hold" / "one").touch()
        os.killpg(first, signal.SIGKILL)
        # The watcher's verdict on the exit: held (a restart would have come instead).
        wait_until(lambda: held.held, 10, "the watcher to hold the exited child", interval=0.1)
        assert held.process.poll() is not None and held.process.pid == first
        assert not supervisor.failed.is_set()  # max_restarts=0: an unheld exit would fail
        (tmp_path / "hold" / "one").unlink()
        wait_until(
            lambda: held.process.pid != first and held.ready.is_set(),
            10,
            "a start once released",
            interval=0.1,
        )
        assert held.restarts == 0 and not supervisor.failed.is_set()
    finally:
        supervisor.stop()


def test_each_component_gets_its_own_stop_budget_and_the_stage_below_stops_after(
    tmp_path, monkeypatch
):
    """Pinot's stop commits its consuming segments while Kafka is up: the stage below
    gets SIGTERM only once the stage above has stopped, and a component is killed only
    after its own ``stop_timeout`` (a short one for a child that ignores SIGTERM, a
    longer one for a child that takes its time to stop cleanly)."""
    import io

    from localrun.components import Component
    from localrun.supervisor import Supervisor

    monkeypatch.setenv("ORDERTRACK_VAR_DIR", str(tmp_path))
    marks = tmp_path / "marks"
    on_term = textwrap.dedent(
        """
        import signal, sys, time
        name, seconds, marks = sys.argv[1], float(sys.argv[2]), sys.argv[3]
        def term(*_):
            if seconds < 0:
                return  # ignores it
            time.sleep(seconds)
            with open(marks, "a") as out:
                out.write(f"{name} {time.monotonic()}\\n")
            sys.exit(0)
        signal.signal(signal.SIGTERM, term)
        print("up", flush=True)
        while True:
            time.sleep(0.1)
        """
    )

    def child(name: str, stage: int, seconds: float, budget: float) -> Component:
        argv = [sys.executable, "-c", on_term, name, str(seconds), str(marks)]
        return Component(name, argv, "up", stage, stop_timeout=budget)

    supervisor = Supervisor(
        [child("broker", 0, 0, 5), child("committer", 1, 1.5, 5), child("stubborn", 1, -1, 0.5)],
        out=io.StringIO(),
    )
    assert supervisor.start()
    waited: dict[int, float] = {}  # pid -> the first time budget the supervisor gave it
    wait = subprocess.Popen.wait

    def timed_wait(proc: subprocess.Popen, timeout: float | None = None) -> int:
        if timeout is not None:
            waited.setdefault(proc.pid, timeout)
        return wait(proc, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", timed_wait)
    supervisor.stop()
    broker, committer, stubborn = supervisor.children
    stopped = dict(line.split() for line in marks.read_text().splitlines())
    assert list(stopped) == ["committer", "broker"]  # the stage below after the one above
    assert committer.process.returncode == 0  # not killed at the stubborn one's budget
    assert stubborn.process.returncode == -signal.SIGKILL
    # Each was waited for within its own budget (0.5 s and 5 s from the signal), not the
    # default 10 s: the budgets the supervisor gave, not how long the machine took.
    assert waited[stubborn.process.pid] <= 0.5 and waited[committer.process.pid] <= 5

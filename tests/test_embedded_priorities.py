"""On one machine the stream job's micro-batches must not hold up the paths that must be
instant: the supervisor starts it at a lower priority, and everything it starts inherits it."""

from __future__ import annotations

import io
import os
import sys
import time

from embedded.components import STREAMING_NICE, Component, components
from embedded.supervisor import Supervisor

#: Prints its own niceness and that of a process it starts (as the job starts its JVM).
CHILD = """
import os, subprocess, sys, time
inner = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"],
                       capture_output=True, text=True).stdout.strip()
print(f"nice {os.nice(0)} {inner}", flush=True)
print("child: ready", flush=True)
time.sleep(30)
"""


def test_the_stream_job_and_what_it_starts_run_below_the_live_paths():
    by_name = {c.name: c for c in components()}
    assert STREAMING_NICE > 0
    assert by_name["streaming"].nice == STREAMING_NICE
    assert {name for name, c in by_name.items() if c.nice} == {"streaming"}

    out = io.StringIO()
    base = os.nice(0)
    job = Component("streaming", [sys.executable, "-c", CHILD], "child: ready", 0, nice=4)
    supervisor = Supervisor([job], out=out, max_restarts=0)
    try:
        assert supervisor.start()
        deadline = time.monotonic() + 10
        while f"nice {base + 4} {base + 4}" not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.05)
    finally:
        supervisor.stop()

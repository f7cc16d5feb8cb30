"""The stream job's silent stall in ``bench_streaming``, reduced to its mechanism.

The benchmark started the job with ``stdout=PIPE`` and read it only until "streaming:
ready". Spark then wrote one WARN line to stdout for every micro-batch slower than the
trigger ("Current batch is falling behind. The trigger interval is 100 milliseconds, but
spent 719 milliseconds", about 274 bytes with its prefix). Nobody read the pipe; once
its buffer was full the writing thread (Spark's stream execution thread) blocked in
``write(1, ...)`` and no batch ever started again: no error, no exit. The job now keeps
that logger at ERROR and every launcher reads or redirects the job's stdout, but any
child on an unread pipe stalls the same way (docs/operations.md). This writes such lines
from a child whose pipe is not read, and reports how many got through and what the
child's writing thread waits on (``/proc/PID/wchan``).

Not a test. Usage::

    .venv/bin/python bench/repro_pipe_stall.py
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

LINE = (
    "2026-11-26T09:57:35.239167550Z stream execution thread for ordertrack_enrich "
    "[id = 12b5105b-3b9c-43a6-8fa4-aa8807129615, runId = f6cd4593-c2c8-453f-92a6-"
    "3322d58bf7da] WARN Current batch is falling behind. The trigger interval is 100 "
    "milliseconds, but spent 775 milliseconds"
)
CHILD = f"""
import sys
for n in range(1, 10_001):
    sys.stdout.write({LINE!r} + "\\n")
    sys.stdout.flush()
    sys.stderr.write(f"{{n}}\\n")
    sys.stderr.flush()
"""


def main() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,  # as bench_streaming did: read until ready, then never again
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    written = [0]

    def count() -> None:  # stderr is read: it only counts the lines written to stdout
        for line in child.stderr:
            written[0] = int(line)

    threading.Thread(target=count, daemon=True).start()
    time.sleep(3)
    wchan = Path(f"/proc/{child.pid}/wchan").read_text()
    print(f"line of {len(LINE) + 1} bytes; lines written in 3 s: {written[0]} of 10,000")
    print(f"bytes into the pipe: {written[0] * (len(LINE) + 1)}; the child waits in: {wchan}")
    print(f"child still running: {child.poll() is None}")
    child.kill()


if __name__ == "__main__":
    main()

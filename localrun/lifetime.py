"""Children that never outlive the process that started them, and who holds a port.

Every local component (the broker's JVM, Pinot's, the stream job, the web workers) is
started with Linux's parent-death signal: when its parent exits for any reason (Ctrl-C,
a hangup, SIGKILL, a crash) the kernel sends the child SIGTERM, and the child stops as
it would on Ctrl-C (a JVM runs its shutdown hooks, so the broker's log stays clean).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, new_session: bool = True) -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets ``sig`` when this
    process exits. (Linux sends it when the *thread* that forked the child ends, so start
    children from a thread that lives as long as they should.)

    ``new_session``: the child leads a session of its own (the supervisor's components:
    Ctrl-C reaches the supervisor, which stops them in order); a launcher's JVM stays in
    the launcher's process group, so a signal to the component's group reaches it too."""
    parent = os.getpid()

    def preexec() -> None:
        if new_session:
            os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)

    return preexec


def port_holder(port: int) -> str:
    """Who listens on TCP ``port`` on this machine: "pid 123 (java kafka.Kafka ...)",
    or "" when nobody does (or it cannot be told)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return ""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    return f"pid {proc.name} ({command.strip()[:160]})"
        except OSError:
            continue
    return "another user's process"


def refuse_taken_port(port: int, what: str) -> None:
    """Exit with a message naming the process that holds ``port`` (an earlier run left
    behind, or another program), instead of a JVM's "address already in use" later."""
    holder = port_holder(port)
    if holder:
        sys.exit(f"{what}: port {port} is taken by {holder}; stop it, or set another port")

"""Ports for engines that this process starts and a child process binds later.

The old way (bind port 0, close it, let a child bind it) drew the port from the kernel's
ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), from which every outgoing
connection also takes its local port, and left the port free between the choice and the
child's bind: a test's Kafka failed in CI with "Address already in use". Here a port:

- comes from a reserved range outside the ephemeral one (20000-29999, or
  ``ORDERTRACK_PORT_RANGE=LOW-HIGH``; the part of it the kernel could hand out is never
  used, and none of the fixed ports ``make run`` and ``make run-prod`` listen on);
- is locked for this process's life (a POSIX lock on the byte at offset ``port`` of
  ``<tmp>/ordertrack-ports-<uid>.lock``, one file kept open, so a session that chooses
  hundreds of ports holds one descriptor): no other process on this machine that chooses
  here gets it, whichever checkout it runs from;
- could be bound at the moment it was chosen (nothing listens on it, on any address).

``make run-prod``, the tests and the benchmarks choose their engines' ports here; ``make
run`` listens on its fixed ones.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

#: Where the ports are chosen unless ORDERTRACK_PORT_RANGE says otherwise.
DEFAULT_RANGE = (20000, 29999)
#: What ``make run`` and ``make run-prod`` listen on by default (web, Kafka, Pinot,
#: PostgreSQL, Redis, metrics, Prometheus, the mail sink and the local push service): never
#: chosen, whatever the range.
FIXED = frozenset({
    1025, 2181, 5432, 6379, 8000, 8088, 8097, 8098, 8099, 8197, 8198, 9000, 9090, 9092,
    9093, 9100, 9101, 9102, 9103, 9104, 19092, 19093,
})  # fmt: skip
LOCK_FILE = Path(tempfile.gettempdir()) / f"ordertrack-ports-{os.getuid()}.lock"

#: The ports this process holds: POSIX locks belong to the process, so its own threads
#: would not be stopped by them; this set (under ``_lock``) does that.
_held: set[int] = set()
_lock = threading.Lock()
_fd: int | None = None


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (and port 0)."""
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def reserved_range() -> range:
    """The ports this module chooses from: the configured range without the part the
    kernel could give an outgoing connection. Refuses (RuntimeError) a range that is all
    ephemeral, rather than hand out ports that can be taken under a child's feet."""
    text = os.environ.get("ORDERTRACK_PORT_RANGE")
    low, high = (int(part) for part in text.split("-")) if text else DEFAULT_RANGE
    eph_low, eph_high = ephemeral_range()
    below, above = range(low, min(high, eph_low - 1) + 1), range(max(low, eph_high + 1), high + 1)
    usable = max(below, above, key=len)
    if not usable:
        raise RuntimeError(
            f"ports {low}-{high} all lie in the kernel's ephemeral range {eph_low}-{eph_high} "
            "(net.ipv4.ip_local_port_range); set ORDERTRACK_PORT_RANGE=LOW-HIGH outside it"
        )
    return usable


def free_port() -> int:
    """A port of the reserved range that nothing listens on, locked for this process's
    life so no other chooser on this machine gets it before the child binds it."""
    ports = reserved_range()
    start = random.randrange(len(ports))  # choosers in parallel rarely try the same ones
    for i in range(len(ports)):
        port = ports[(start + i) % len(ports)]
        if port not in FIXED and _take(port):
            return port
    raise RuntimeError(f"no free port left in {ports.start}-{ports.stop - 1}")


def claim(port: int) -> bool:
    """Lock ``port`` for this process if it is in the reserved range, no other process
    holds it and it can be bound now (a port ``make run-prod`` kept from its last run).
    True if this process holds it."""
    return port in _held or (port in reserved_range() and port not in FIXED and _take(port))


def _take(port: int) -> bool:
    """Lock ``port`` unless this or another process holds it or it cannot be bound now."""
    global _fd
    with _lock:
        if port in _held:
            return False
        if _fd is None:  # never closed: closing any descriptor of it drops every lock
            _fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False  # another process holds it
            raise
        if not _bindable(port):
            fcntl.lockf(_fd, fcntl.LOCK_UN, 1, port)
            return False
        _held.add(port)
        return True


def _bindable(port: int) -> bool:
    """Nothing is bound to ``port`` on any local address (the wildcard bind fails
    if anything is)."""
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True

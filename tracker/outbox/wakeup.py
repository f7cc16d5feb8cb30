"""Waking the relay when an outbox row commits, instead of querying the table all the time.

An idle relay that polls often to stay fresh spends its time finding nothing. Instead,
the transaction that enqueues an event also wakes the relay:

* on PostgreSQL with ``NOTIFY``, which the server delivers at commit (never for a
  rolled-back transaction) to every listening relay;
* on SQLite (one machine) with a datagram to the relay's socket, sent after commit.
  Its path is derived from the database's, so every process writing to one database
  file wakes the relay of that file.

A wake-up is a hint, never the data: rows stay in the table until the broker has them.
A lost one (no relay running yet, a full socket buffer, a dropped ``LISTEN``
connection) delays publishing by at most the relay's idle poll
(``OUTBOX_RELAY_IDLE_SECONDS``). Where wake-ups cannot reach the relay at all (a pooler
in transaction mode between the relay and PostgreSQL), set that to the busy poll.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import socket
import tempfile
import threading
import time
from typing import Any

from django.db import connection, transaction

log = logging.getLogger(__name__)

#: The PostgreSQL channel the relay listens on.
CHANNEL = "ordertrack_outbox"


def socket_path() -> str:
    """The relay's wake-up socket for this database (SQLite). An in-memory database is
    private to its process, so its path names the process too."""
    name = str(connection.settings_dict["NAME"])
    if connection.is_in_memory_db():
        name = f"{name}#{os.getpid()}"
    digest = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"ordertrack-relay-{digest}.sock")


def announce() -> None:
    """Wake the relay once the current transaction commits (call inside it)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {CHANNEL}")  # repeated ones fold into one at commit
    else:
        path = socket_path()
        transaction.on_commit(lambda: _send(path))


_sender = threading.local()


def _send(path: str) -> None:
    sock = getattr(_sender, "socket", None)
    if sock is None:
        sock = _sender.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
    # No relay yet, or its buffer already holds a wake-up: either way nothing to do.
    with contextlib.suppress(OSError):
        sock.sendto(b"!", path)


class Waiter:
    """The relay's end: :meth:`wait` returns when a wake-up came, or after ``timeout``."""

    def __init__(self) -> None:
        self._socket: socket.socket | None = None
        self._listener: Any = None
        self._path = ""

    @property
    def listening(self) -> bool:
        return self._socket is not None or self._listener is not None

    def open(self) -> Waiter:
        try:
            if connection.vendor == "postgresql":
                self._listen()
            else:
                self._bind()
        except Exception as exc:  # noqa: BLE001 - no wake-ups: the relay polls instead
            log.warning("relay: no wake-ups (%s); polling instead", exc)
            self.close()
        return self

    def _bind(self) -> None:
        self._path = socket_path()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)  # a relay that died left it behind
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(self._path)
        sock.setblocking(False)
        self._socket = sock

    def _listen(self) -> None:
        params = connection.get_connection_params()
        listener = connection.get_new_connection(params)
        listener.autocommit = True
        listener.execute(f"LISTEN {CHANNEL}")
        self._listener = listener

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Whether a wake-up came within ``timeout`` seconds (checks ``stop`` 4 times a s)."""
        if not self.listening:
            stop.wait(timeout)
            return False
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                if self._ready(min(left, 0.25)):
                    return True
            except Exception as exc:  # noqa: BLE001 - the server went away: poll instead
                log.warning("relay: lost its wake-ups (%s); polling instead", exc)
                self.close()
                stop.wait(max(left, 0))
                return False
        return False

    def _ready(self, timeout: float) -> bool:
        if self._socket is not None:
            readable, _, _ = select.select([self._socket], [], [], timeout)
            if not readable:
                return False
            with contextlib.suppress(BlockingIOError):
                while self._socket.recv(64):  # one pass of the relay serves them all
                    pass
            return True
        # Wake-ups left over are harmless: each costs one look at an empty outbox.
        return any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
            with contextlib.suppress(OSError):
                os.unlink(self._path)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
            self._listener = None

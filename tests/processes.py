"""The processes a test started, read from ``/proc``: their whole command lines (``ps``
cuts each line at 80 columns when pytest runs it without a terminal), their descendants
whatever their session, and the TCP sockets they listen on."""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path


def cmdline(pid: int) -> list[str]:
    """A process's whole argument vector; empty once it has exited."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


@dataclass(frozen=True)
class Listener:
    pid: int
    who: str
    address: str
    port: int
    loopback: bool

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.who:<24} pid {self.pid:<7} {host}:{self.port}"


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address of /proc/net/tcp{,6}: 32-bit words in the host's byte order."""
    raw = bytes.fromhex(hex_address)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def listening_inodes() -> dict[int, tuple[str, int, bool]]:
    """Socket inode -> (address, port, loopback) of every TCP socket in LISTEN state."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            address = _address(hex_address)
            found[int(fields[9])] = (str(address), int(hex_port, 16), address.is_loopback)
    return found


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid, whatever their session)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def describe(pid: int) -> str:
    """Which part of the system a process is, from its whole command line."""
    argv = cmdline(pid)
    if not argv:
        return "?"
    for arg in argv:
        if arg.startswith("-Dpinot.component="):
            return "pinot " + arg.split("=", 1)[1]
    if "org.apache.spark.deploy.SparkSubmit" in argv:
        return "spark driver"
    if any("kafka.Kafka" in arg or "KafkaRaftServer" in arg for arg in argv):
        return "kafka node"
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        return "python -m " + argv[argv.index("-m") + 1]
    script = next((a for a in argv if a.endswith("manage.py")), None)
    if script is not None and argv.index(script) + 1 < len(argv):
        return "manage.py " + argv[argv.index(script) + 1]
    return Path(argv[0]).name


def listeners(*roots: int) -> list[Listener]:
    """Every listening TCP socket held by one of ``roots`` or a process below it."""
    inodes = listening_inodes()
    out = []
    for pid in {pid for root in roots for pid in descendants(root)}:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        seen = set()
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if not target.startswith("socket:["):
                continue
            inode = int(target[len("socket:[") : -1])
            if inode in inodes and inode not in seen:
                seen.add(inode)
                address, port, loopback = inodes[inode]
                out.append(Listener(pid, describe(pid), address, port, loopback))
    return sorted(out, key=lambda item: (item.who, item.port))

"""The local ports of ``make run-prod``'s processes, the same from one run to the next.

They are kept in the run's folder (``ports.json``) and taken again next time while free:
a Pinot server is known to its cluster by its host and port (``Server_127.0.0.1_<port>``,
to which the controller assigned its segments), and a Kafka node's address is stored by
its peers and its readers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from localrun.ports import claim, free_port


@dataclass
class Ports:
    """The local port each compose address maps to (0: a free one, chosen here).

    The fields are the single-node run's; :meth:`of` names the ports of further
    instances (``"kafka-2"``, ``"kafka-2:controller"``, ``"web-2:metrics"``...)."""

    postgres: int = 0
    redis: int = 0
    kafka: int = 0
    kafka_controller: int = 0
    pinot: int = 0
    pinot_controller: int = 0
    pinot_server: int = 0
    pinot_server_admin: int = 0
    zookeeper: int = 0
    spark: int = 0
    spark_ui: int = 0
    worker_ui: int = 0
    #: The public address: uvicorn's, or the proxy's in front of several web processes.
    web: int = 8000
    more: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type == "int" and getattr(self, f.name) == 0:
                setattr(self, f.name, free_port())

    def used(self) -> set[int]:
        fixed = {getattr(self, f.name) for f in fields(self) if f.type == "int"}
        return (fixed | set(self.more.values())) - {0}

    def of(self, key: str) -> int:
        """The port named ``key``, chosen when first asked for."""
        if key not in self.more:
            self.more[key] = free_port()
        return self.more[key]

    @classmethod
    def kept(cls, var: Path, web: int = 8000) -> Ports:
        """The ports of the last run in ``var`` that this process could claim again
        (:func:`localrun.ports.claim`); new ones for the rest."""
        saved = (
            json.loads((var / "ports.json").read_text()) if (var / "ports.json").exists() else {}
        )
        names = {f.name for f in fields(cls) if f.type == "int"} - {"web"}
        fixed = {k: v for k, v in saved.items() if k in names and v != web and claim(v)}
        ports = cls(**fixed, web=web)
        for key, port in (saved.get("more") or {}).items():
            if port not in ports.used() and claim(port):
                ports.more[key] = port
        return ports

    def save(self, var: Path) -> None:
        var.mkdir(parents=True, exist_ok=True)
        kept = {f.name: getattr(self, f.name) for f in fields(self) if f.type == "int"}
        (var / "ports.json").write_text(json.dumps({**kept, "more": self.more}, indent=1))

"""The one way to start components of the system, learn where they answer, and stop them.

``make run`` (``python -m localrun``), ``make run-prod`` (localrun/compose), the test
suite's engines (tests/engines.py) and every benchmark (bench/harness.py) start their
processes through :class:`System`::

    system = System(["kafka", "pinot"], workdir=tmp)   # addresses chosen, nothing runs
    with system:                                       # started in stages, ready
        system.kafka, system.pinot_broker_url, system.web_url, system.pid("pinot")
                                                       # stopped, last stage first

Without ``workdir`` it is ``make run``'s system: data under ``var/`` and the configured
ports (``KAFKA_BOOTSTRAP_SERVERS``, ``WEB_PORT``...). With one it is a run of its own
beside others: data and logs under ``workdir``, every port a free one, so two runs (a
benchmark beside ``make test``) never meet. The caller's own environment is never
changed: :attr:`System.env` holds the variables that point a client at the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TextIO

from localrun.components import Component, components
from localrun.console import Console
from localrun.pinot.conf import free_ports_env
from localrun.ports import free_port
from localrun.supervisor import Child, Supervisor


class LaunchError(RuntimeError):
    """A component did not become ready (its log is under the run's ``logs/``), or the
    start was ``interrupted`` (Ctrl-C while starting: not a failure)."""

    def __init__(self, message: str, interrupted: bool = False) -> None:
        super().__init__(message)
        self.interrupted = interrupted


@contextlib.contextmanager
def environ(variables: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``variables`` for the duration (components are read from it)."""
    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def free_addresses(workdir: Path) -> dict[str, str]:
    """The variables of a run in ``workdir`` on free loopback ports: every listener the
    components open, and the folders they write."""
    return {
        "ORDERTRACK_VAR_DIR": str(workdir),
        "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        **free_ports_env(),
        "WEB_PORT": str(free_port()),
        "RELAY_METRICS_PORT": str(free_port()),
        "STREAMING_METRICS_PORT": str(free_port()),
        "PUSH_BRIDGE_METRICS_PORT": str(free_port()),
        "NOTIFIER_METRICS_PORT": str(free_port()),
        "EMAIL_PORT": str(free_port()),
        "PUSH_SERVICE_PORT": str(free_port()),
        "STREAMING_CHECKPOINT_DIR": str(workdir / "checkpoint"),
    }


class System:
    """Named components of :func:`localrun.components.components` (or given ones), their
    addresses, and one supervisor that starts, watches and stops them."""

    def __init__(
        self,
        names: Iterable[str] | None = None,
        *,
        workdir: Path | None = None,
        env: Mapping[str, str] | None = None,
        out: TextIO | None = None,
        comps: list[Component] | None = None,
        console: Console | None = None,
        max_restarts: int = 5,
    ) -> None:
        self.workdir = workdir
        self.env: dict[str, str] = {**(free_addresses(workdir) if workdir else {}), **(env or {})}
        with environ(self.env):
            chosen = comps if comps is not None else components()
            wanted = set(names) if names is not None else None
            unknown = (wanted or set()) - {c.name for c in chosen}
            if unknown:
                raise ValueError(f"no such component: {', '.join(sorted(unknown))}")
            picked = [
                dataclasses.replace(c, env={**(c.env or os.environ), **self.env})
                for c in chosen
                if wanted is None or c.name in wanted
            ]
            self.supervisor = Supervisor(
                picked, out=out or sys.stdout, max_restarts=max_restarts, console=console
            )

    # ------------------------------------------------------------------ addresses

    def _get(self, name: str, default: str = "") -> str:
        return self.env.get(name) or os.environ.get(name) or default

    @property
    def kafka(self) -> str:
        """Kafka's bootstrap address."""
        return self._get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")

    @property
    def pinot_broker_url(self) -> str:
        return self._get("PINOT_BROKER_URL", "http://127.0.0.1:8099")

    @property
    def pinot_controller_url(self) -> str:
        return self._get("PINOT_CONTROLLER_URL", "http://127.0.0.1:9000")

    @property
    def web_url(self) -> str:
        return f"http://{self._get('WEB_HOST', '127.0.0.1')}:{self._get('WEB_PORT', '8000')}"

    @property
    def children(self) -> list[Child]:
        return self.supervisor.children

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.component.name == name)

    def pid(self, name: str) -> int:
        """The pid of component ``name``'s process (0 while it does not run)."""
        process = self.child(name).process
        return process.pid if process is not None else 0

    # ------------------------------------------------------------------ lifecycle

    def start(self, ready_message: str = "") -> System:
        """Start the components in stages; raise :class:`LaunchError` if one never becomes
        ready (what did start is stopped)."""
        if not self.supervisor.start(ready_message=ready_message):
            interrupted = self.supervisor.stopping.is_set()
            self.stop()
            raise LaunchError(
                f"a component did not start: see {self.supervisor.log_dir}", interrupted
            )
        return self

    def stop(self) -> None:
        self.supervisor.stop()

    def __enter__(self) -> System:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""Start, watch and stop every component of the system from one terminal.

What a person running ``make run`` needs: while the system starts, one line per
component as it starts, is ready (in how long) or fails (with the last lines of its log);
a clear "ready" with where to look; then a status line per component every few seconds
and every warning or error as it happens (:mod:`localrun.console`). Every child's whole
output is kept under ``var/logs/`` and reaches the console only with ``LOG_LEVEL=debug``:
the engines' start-up logs are thousands of lines. A child that dies is reported loudly
(the last lines of its log) and restarted with backoff, and Ctrl-C stopping everything cleanly (SIGTERM, then SIGKILL). Every
child gets the kernel's parent-death signal (:mod:`localrun.lifetime`): a hangup, a
SIGKILL or a crash of the supervisor stops the children too.

A fault drill keeps a process down for as long as it likes: while ``var/hold/<name>``
exists, a child that exits is not started again; removing the file starts it at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from localrun.components import Component
from localrun.console import Console
from localrun.lifetime import die_with_parent
from runtime.conf import BASE_DIR, env_str, var_dir

COLOURS = ["36", "33", "32", "35", "34", "31", "96", "93"]
#: How much of a failed child's log the console repeats.
TAIL_LINES = 12


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of ``path`` (read from its end: engine logs
    grow large), or none when it does not exist."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(log.tell() - 64 * 1024, 0))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


@dataclass
class Child:
    """A running (or restarting) component and what the supervisor knows about it."""

    component: Component
    colour: str
    process: subprocess.Popen[str] | None = None
    #: The thread copying the process's output to its log (done once it has all of it).
    pump: threading.Thread | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    restarts: int = 0
    started_at: float = 0.0
    stopped: bool = False  # stopped on purpose: not restarted
    held: bool = False  # exited while its hold file exists: started when it goes


class Supervisor:
    """Runs the components in stages, restarts one that dies, and stops them all on Ctrl-C.

    One foreground process owning every child means ``make run`` leaves nothing
    behind, and a crash is reported where the person running it is looking.
    """

    def __init__(
        self,
        comps: list[Component],
        out: TextIO = sys.stdout,
        max_restarts: int = 5,
        console: Console | None = None,
    ) -> None:
        self.children = [
            Child(c, COLOURS[i % len(COLOURS)]) for i, c in enumerate(comps) if c.enabled()
        ]
        self.out = out
        self.max_restarts = max_restarts
        self.stopping = threading.Event()
        self.failed = threading.Event()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.log_dir = var_dir() / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.hold_dir = var_dir() / "hold"
        self.width = max((len(c.component.name) for c in self.children), default=6)
        self.console = console or Console()
        self.up = threading.Event()  # start-up is over: status lines and problems now
        self.json = env_str("LOG_FORMAT", "plain").lower() == "json"
        #: Every child is started by one thread that lives as long as this process: the
        #: parent-death signal follows the thread that forked, not the process, and a
        #: restart comes from the watcher's thread, which ends before the children do.
        self._spawns: queue.Queue[tuple[Child, threading.Event]] = queue.Queue()
        threading.Thread(target=self._spawner, name="supervisor-spawner", daemon=True).start()

    # ----------------------------------------------------------------- output

    def say(self, text: str, name: str = "system", colour: str = "1") -> None:
        if self.json:
            record = {"time": time.time(), "component": name, "message": text}
            with self._lock:
                self.out.write(json.dumps(record) + "\n")
                self.out.flush()
            return
        stamp = f"{time.monotonic() - self._t0:6.1f}s"
        tty = self.out.isatty()
        label = name.ljust(self.width)
        label = f"\033[{colour}m{label}\033[0m" if tty else label
        with self._lock:
            self.out.write(f"{stamp} {label} | {text}\n")
            self.out.flush()

    def _pump(self, child: Child, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with open(self.log_dir / f"{child.component.name}.log", "a", encoding="utf-8") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                text = line.rstrip("\n")
                shown = self.console.shows(child.component.name, text)  # it counts batches
                if shown and (self.up.is_set() or self.console.debug):
                    self.say(text, child.component.name, child.colour)
                if not child.ready.is_set() and child.component.ready_text in line:
                    child.ready.set()
                    seconds = time.monotonic() - child.started_at
                    self.say(f"ready in {seconds:.1f} s", child.component.name, child.colour)

    def _report(self, child: Child, what: str) -> None:
        """``what`` went wrong with ``child``, then the last lines of its log: the reason
        is there, and without it the console would only point at the file."""
        name = child.component.name
        if child.pump is not None:
            child.pump.join(2.0)  # the last lines it wrote before it exited
        log = self.log_dir / f"{name}.log"
        shown = log.relative_to(BASE_DIR) if log.is_relative_to(BASE_DIR) else log
        tail = log_tail(log)
        self.say(
            f"!! {name} {what}; " + (f"the last lines of {shown}:" if tail else f"see {shown}")
        )
        for line in tail:
            self.say(f"   {line}", name, child.colour)

    # ----------------------------------------------------------------- lifecycle

    def _spawner(self) -> None:
        while True:
            child, done = self._spawns.get()
            try:
                self._start_process(child)
            finally:
                done.set()

    def _spawn(self, child: Child) -> None:
        """Start ``child`` (on the spawner thread) and return once it runs."""
        done = threading.Event()
        self._spawns.put((child, done))
        done.wait()

    def _start_process(self, child: Child) -> None:
        base = os.environ if child.component.env is None else child.component.env
        env = {**base, "PYTHONUNBUFFERED": "1"}
        child.ready.clear()
        child.started_at = time.monotonic()
        proc = subprocess.Popen(
            child.component.argv,
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            # Its own session (Ctrl-C reaches us only; we stop children in order), and
            # SIGTERM when this process ends, however it ends.
            preexec_fn=die_with_parent(),
        )
        child.process = proc
        child.pump = threading.Thread(target=self._pump, args=(child, proc), daemon=True)
        child.pump.start()
        note = child.component.waiting_note
        self.say(f"starting: {note}" if note else "starting", child.component.name, child.colour)

    def _watch(self) -> None:
        """Report children that exit on their own, and restart them with backoff."""
        while not self.stopping.is_set():
            for child in self.children:
                proc = child.process
                if proc is None or proc.poll() is None or self.stopping.is_set() or child.stopped:
                    continue
                name = child.component.name
                hold = self.hold_dir / name
                if hold.exists() or child.held:
                    if not child.held:
                        self.say(f"{name} exited with code {proc.returncode}; held ({hold})")
                    elif not hold.exists():  # released: not a failure, no back-off
                        self.say(f"{name} released: starting it again")
                        self._spawn(child)
                    child.held = hold.exists()
                    continue
                self._report(child, f"exited with code {proc.returncode}")
                if child.restarts >= self.max_restarts:
                    self.say(f"!! {name} keeps failing; stopping the system")
                    child.process = None
                    self.failed.set()
                    self.stopping.set()
                    return
                child.restarts += 1
                delay = min(2**child.restarts, 30)
                self.say(f"restarting {name} in {delay}s (restart {child.restarts})")
                child.process = None
                if self.stopping.wait(delay):
                    return
                self._spawn(child)
            self.stopping.wait(0.5)

    def stop_on_signals(self) -> None:
        """Ctrl-C, SIGTERM and a hangup (the terminal closed, an SSH session dropped) stop
        the system, also while it is still starting (the stream job takes a minute):
        :meth:`start` returns False and the caller stops."""
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, lambda *_: self.stopping.set())

    def start(self, ready_message: str = "") -> bool:
        """Start the stages in order; return False if a stage never became ready."""
        stages = sorted({c.component.stage for c in self.children})
        for stage in stages:
            if self.stopping.is_set():  # stopped during start-up (Ctrl-C)
                return False
            group = [c for c in self.children if c.component.stage == stage]
            for child in group:
                self._spawn(child)
            for child in group:
                deadline = time.monotonic() + child.component.ready_timeout
                while not child.ready.wait(0.5):
                    proc = child.process
                    if self.stopping.is_set():
                        return False
                    if proc is not None and proc.poll() is not None:
                        self._report(child, f"failed to start (exit code {proc.returncode})")
                        return False
                    if time.monotonic() > deadline:
                        timeout = child.component.ready_timeout
                        self._report(child, f"not ready after {timeout:.0f} s")
                        return False
        threading.Thread(target=self._watch, daemon=True).start()
        if ready_message:
            self.say(ready_message)
        self.up.set()
        threading.Thread(
            target=self.console.run, args=(self._status, self._running, self.stopping), daemon=True
        ).start()
        return True

    def _status(self, text: str, name: str) -> None:
        child = next((c for c in self.children if c.component.name == name), None)
        self.say(text, name, child.colour if child else "1")

    def _running(self, name: str) -> bool:
        return any(
            c.component.name == name and c.process is not None and c.process.poll() is None
            for c in self.children
        )

    def stop_component(self, name: str, timeout: float = 30.0) -> None:
        """Stop one component for good (e.g. the load generator), leaving the rest running."""
        for child in self.children:
            if child.component.name == name and child.process is not None:
                child.stopped = True
                child.process.send_signal(signal.SIGTERM)
                try:
                    child.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(child.process.pid, signal.SIGKILL)
                    child.process.wait()
                self.say(f"stopped {name}")

    def stop(self) -> None:
        """Stop every component, the last stage first, each within its ``stop_timeout``,
        so readers close while their broker still answers (a consumer closing against a
        broker already gone can outlive the budget), and Pinot commits its consuming
        segments while Kafka is up."""
        self.stopping.set()
        for stage in sorted({child.component.stage for child in self.children}, reverse=True):
            children = [c for c in reversed(self.children) if c.component.stage == stage]
            for child in children:
                proc = child.process
                if proc is not None and proc.poll() is None:
                    self.say(f"stopping {child.component.name}")
                    proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            for child in children:
                proc = child.process
                if proc is None:
                    continue
                deadline = signalled + child.component.stop_timeout
                try:
                    proc.wait(max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    self.say(f"{child.component.name} did not stop in time: killing it")
                # Whatever the child left behind in its session (e.g. Spark's JVM) goes too.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.say("all components stopped")

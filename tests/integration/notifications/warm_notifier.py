"""``manage.py notify`` started again and again without paying Django's start-up each time.

Python, ``django.setup()`` and the command's imports take about a second on two shared
cores, and a restarted notifier spends it before it does anything a kill could interrupt;
with 20 kill points that was most of the crash test's time (issue 71). This process sets
Django up and imports the command once, single-threaded, then forks one notifier at a time:
each child runs the real ``notify`` command (``call_command``, as ``manage.py`` does after
its system checks) and is killed with -9 like any process.

Driven over stdin, one word a line, each answered on stdout: ``start`` (answers the pid),
``kill`` (SIGKILL, reaped), ``stop`` (SIGTERM, as a supervisor stops it). The children's
output goes to this process's stderr. ``python -m tests.integration.notifications.warm_notifier``
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback

from django.core.management import call_command, load_command_class


def _child() -> None:
    os.dup2(2, 1)  # stdout is the control pipe: the command's output goes to the log
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    try:
        call_command("notify")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child reports and exits, never returns
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _end(pid: int, sig: signal.Signals, grace: float) -> None:
    os.kill(pid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    load_command_class("tracker.notifications", "notify")  # its imports (the channels), too
    child = None
    for line in sys.stdin:
        word = line.strip()
        if word == "start" and child is None:
            child = os.fork()
            if child == 0:
                _child()
            answer = str(child)
        elif word == "kill" and child is not None:
            _end(child, signal.SIGKILL, 10)
            child, answer = None, "killed"
        elif word == "stop" and child is not None:
            _end(child, signal.SIGTERM, 20)
            child, answer = None, "stopped"
        else:
            answer = f"refused: {word}"
        print(answer, flush=True)
    if child is not None:
        _end(child, signal.SIGTERM, 20)


if __name__ == "__main__":
    main()

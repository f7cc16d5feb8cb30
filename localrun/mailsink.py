"""The local mail sink of ``make run``: a real SMTP server (aiosmtpd) that keeps every mail.

Each mail the notifier sends is written as it arrived to ``var/mail/<time>-<n>.eml`` (open
it with any mail program or read it as text); the console says where. It listens on
``EMAIL_HOST``:``EMAIL_PORT`` (127.0.0.1:1025), where the notifier's SMTP backend sends.
Production names its own relay in the environment instead.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from pathlib import Path

from aiosmtpd.controller import Controller

from runtime.conf import env_int, env_str, var_dir


def mail_dir() -> Path:
    path = var_dir() / "mail"
    path.mkdir(parents=True, exist_ok=True)
    return path


class Keeper:
    """Writes each accepted message to its own file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._numbers = itertools.count(1)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        name = f"{time.strftime('%Y%m%d-%H%M%S')}-{next(self._numbers):05d}.eml"
        (self.folder / name).write_bytes(envelope.content)
        return "250 Message kept"


def main() -> None:
    folder = mail_dir()
    host, port = env_str("EMAIL_HOST", "127.0.0.1"), env_int("EMAIL_PORT", 1025)
    controller = Controller(Keeper(folder), hostname=host, port=port)
    controller.start()
    print(f"mailsink: ready on {host}:{port}, mails in {folder}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        loop.run_until_complete(stop.wait())
    finally:
        controller.stop()


if __name__ == "__main__":
    main()

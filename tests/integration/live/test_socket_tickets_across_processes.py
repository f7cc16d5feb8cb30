"""A socket ticket is redeemed by whichever web process the socket reaches: ``make run``
runs two uvicorn workers with no Redis, and a ticket kept in the issuing worker's memory
was refused (4401) whenever the socket landed on the other one (found 2026-12-08 from a
fresh clone: 3 of 6 connects). Another process here is a real one, on the same settings."""

from __future__ import annotations

import os
import subprocess
import sys

from runtime.conf import BASE_DIR
from tracker.accounts.services import issue_socket_ticket, redeem_socket_ticket

REDEEM = """
import sys, django
django.setup()
from tracker.accounts.services import redeem_socket_ticket
print(redeem_socket_ticket(sys.argv[1]))
"""


def _redeem_elsewhere(ticket: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", REDEEM, ticket], env=env, cwd=BASE_DIR,
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def test_a_ticket_issued_in_one_process_is_redeemed_once_in_another():
    ticket = issue_socket_ticket(object(), None, "a-session-key")
    assert _redeem_elsewhere(ticket) == "('session', 'a-session-key')"
    assert redeem_socket_ticket(ticket) is None  # used: here too
    assert _redeem_elsewhere(ticket) == "None"

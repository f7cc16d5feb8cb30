"""System check: with debug off, no demo account may still hold the public password.

The seeder creates only missing accounts, so a database seeded by ``make run`` (or before
debug off refused the public password) keeps ``operator``, a superuser, and every other
demo account on ``ordertrack-demo``. Tagged ``database``: ``migrate`` runs it (compose's
``migrate`` one-shot, before ``web`` starts) and so does ``manage.py check --database default``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.db import DatabaseError

from tracker.simulator.seed import DEMO_PASSWORD, accounts_with_the_public_password


@register(Tags.database, Tags.security)
def no_public_demo_password(app_configs: Any = None, databases: Any = None, **_: Any) -> list:
    """An error naming the accounts still on the public password, when debug is off."""
    if settings.DEBUG or not databases or "default" not in databases:
        return []
    try:
        names = accounts_with_the_public_password()
    except DatabaseError:  # no tables yet (a fresh database, before its first migrate)
        return []
    if not names:
        return []
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return [
        Error(
            f"DJANGO_DEBUG is off and {len(names)} demo account(s) still have the public demo "
            f"password {DEMO_PASSWORD!r}: {shown}.",
            hint="Set SIMULATOR_DEMO_PASSWORD and run `manage.py simulate --seed-only` (it moves "
            "them to that password and makes operator no superuser), or change or deactivate "
            "them (`manage.py changepassword <name>`). See docs/operations.md, production "
            "checklist.",
            id="simulator.E001",
        )
    ]

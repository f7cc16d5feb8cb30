"""Hardening (issue 15): safe defaults, request size, login throttles, admin edits,
future-dated GPS points and huge or deeply nested input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db


def _start_django(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='tracker.settings';"
        "django.setup(); print('started')"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**base, **env}, capture_output=True, text=True
    )


def test_debug_off_with_the_development_secret_key_refuses_to_start():
    refused = _start_django({"DJANGO_DEBUG": "false", "DJANGO_ALLOWED_HOSTS": "example.com"})
    assert refused.returncode != 0
    assert "started" not in refused.stdout
    assert "ImproperlyConfigured" in refused.stderr
    assert "Set DJANGO_SECRET_KEY" in refused.stderr  # says what to set
    started = _start_django(
        {"DJANGO_DEBUG": "false", "DJANGO_ALLOWED_HOSTS": "example.com",
         "DJANGO_SECRET_KEY": "k" * 60}
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    # Development keeps working with no configuration at all.
    assert _start_django({}).stdout.strip() == "started"

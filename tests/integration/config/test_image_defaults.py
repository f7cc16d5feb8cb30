"""The application image is safe by default outside compose (issue 53, L4).

Run on its own (``docker run ordertrack-app``), the image must not serve with debug on,
the public development key, or a client-controlled client address (uvicorn's
``--forwarded-allow-ips *`` lets any client rotate its throttle key with
``X-Forwarded-For``). ``make run`` asks for debug explicitly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _image_env() -> dict[str, str]:
    """The ENV of the image's final stage (``KEY=value`` pairs, continued lines joined)."""
    final = (ROOT / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1].replace("\\\n", " ")
    env = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def _cmd() -> str:
    return next(
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD")
    )


def test_the_image_runs_with_debug_off_unless_told():
    assert _image_env().get("DJANGO_DEBUG") == "false"


def test_the_image_does_not_trust_every_address_to_name_the_client():
    assert '"--forwarded-allow-ips", "*"' not in _cmd()
    assert "--forwarded-allow-ips=*" not in _cmd()


def test_the_image_refuses_to_start_without_a_secret_key():
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup()"
    )
    env = {**base, **{k: v for k, v in _image_env().items() if k.startswith("DJANGO_")}}
    started = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert started.returncode != 0 and "DJANGO_SECRET_KEY" in started.stderr


def test_make_run_asks_for_debug_explicitly():
    makefile = (ROOT / "Makefile").read_text()
    run = makefile.split("\nrun: ", 1)[1].split("\n\n", 1)[0]
    assert "DJANGO_DEBUG=true" in run


def _debug_of(env: dict[str, str]) -> str:
    """``settings.DEBUG`` of a process started with ``env`` and no other DJANGO_ variable."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
        "django.setup(); from django.conf import settings; print(settings.DEBUG)"
    )
    started = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**base, **env}, capture_output=True, text=True
    )
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def test_every_entry_point_runs_with_debug_off_unless_asked_for():
    """Not only the image: ``manage.py``, uvicorn or a script run without DJANGO_DEBUG get
    the production settings (and so refuse the public development key); ``make run``, the
    tests and the benchmarks ask for debug."""
    assert _debug_of({"DJANGO_SECRET_KEY": "k" * 60}) == "False"
    assert _debug_of({"DJANGO_DEBUG": "true"}) == "True"

"""Loaded by pytest before Django's settings (``-p`` in pyproject.toml's ``addopts``): the
tests run the development settings, as ``make run`` does, since debug is off unless asked
for (``config/settings.py``). The processes a test starts inherit it; the tests of debug
off set ``DJANGO_DEBUG=false`` themselves."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_DEBUG", "true")

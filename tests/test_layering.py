"""Imports point down: the domain never imports a delivery channel, the core never Django.

REST (``api``), the pages (``frontend``) and the WebSocket (``tracker.live``) stand
on the domain apps; the domain stands on ``contract``, which the Spark job and
the Pinot stand-in share and which must import without Django.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports_of(package: str) -> dict[str, set[str]]:
    """File -> every module it imports (absolute names; relative imports resolved)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = module.split(".")[: -node.level]
                    base = ".".join([*parent, base] if base else parent)
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)
        out[str(path.relative_to(ROOT))] = names
    return out


def _offending(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    return {
        path: sorted(n for n in names if n.split(".")[0] in forbidden or n in forbidden)
        for path, names in imports_of(package).items()
        if any(n.split(".")[0] in forbidden or n in forbidden for n in names)
    }


def test_nothing_under_tracker_imports_the_api_or_the_pages():
    assert _offending("tracker", ("api", "frontend")) == {}


def test_the_core_imports_no_framework_and_nothing_above_it():
    forbidden = ("django", "rest_framework", "channels", "pyspark", "duckdb", "api", "frontend")
    assert _offending("contract", forbidden) == {}
    above = {
        path: sorted(n for n in names if n.startswith("tracker.") and not n.startswith("contract"))
        for path, names in imports_of("contract").items()
    }
    assert {path: names for path, names in above.items() if names} == {}


def test_the_walk_sees_imports_that_point_up():
    """The checks above would pass vacuously if the walk found no imports at all."""
    api = imports_of("api")
    assert "tracker.orders.policy" in api["api/permissions.py"]
    assert "tracker.tracking.read_model" in api["api/serializers/fields.py"]


def test_importing_the_core_loads_no_django():
    code = (
        "import sys\n"
        "import embedded.broker, contract.conf, contract.events\n"
        "import contract.geo, contract.kafka\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'rest_framework', 'channels', 'pyspark', 'duckdb'))\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""

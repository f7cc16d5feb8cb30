"""Imports point down, and production code never leans on what only the embedded mode runs.

From the top: ``localrun`` (what only ``make run`` and the tests run: broker, supervisor,
compose emulator, the launchers of Apache Kafka and Apache Pinot) may
import anything. ``config`` (the Django project) wires the channels: REST (``api``), the
pages (``frontend``) and the WebSocket (``tracker.live``). The channels stand on the
domain apps (the rest of ``tracker``), which stand on ``runtime`` (settings, Kafka
clients, logs, metrics) and ``contract`` (the events and their rules): what the Spark job
(``streaming``) and Pinot's table loader (``pinot``) share, importing no framework. No
module imports itself back through others (no cycles).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

FRAMEWORKS = (
    "django", "rest_framework", "drf_spectacular", "channels", "channels_redis",
    "pyspark", "pinotdb", "uvicorn",
)  # fmt: skip
#: What production runs (the Docker image's processes); ``localrun`` is what it replaces.
PRODUCTION = (
    "config",
    "contract",
    "runtime",
    "tracker",
    "api",
    "frontend",
    "streaming",
    "pinot",
    "jvm",
)
FIRST_PARTY = (*PRODUCTION, "localrun", "tests", "bench")
CHANNELS = ("api", "frontend", "tracker.live")


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


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _offending(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {
        path: sorted(n for n in names if _within(n, forbidden))
        for path, names in imports_of(package).items()
    }
    return {path: names for path, names in found.items() if names}


def _first_party_outside(package: str, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    """Imports of our own packages other than ``allowed``."""
    found = {
        path: sorted(n for n in names if _within(n, FIRST_PARTY) and not _within(n, allowed))
        for path, names in imports_of(package).items()
    }
    return {path: names for path, names in found.items() if names}


def test_the_contract_imports_no_framework_and_nothing_of_ours_above_it():
    assert _offending("contract", FRAMEWORKS) == {}
    assert _first_party_outside("contract", ("contract",)) == {}


def test_process_plumbing_imports_no_framework_and_only_the_contract_below_it():
    assert _offending("runtime", FRAMEWORKS) == {}
    assert _first_party_outside("runtime", ("runtime", "contract")) == {}


def test_the_spark_job_and_the_pinot_definitions_import_only_the_contract():
    assert _offending("streaming", ("django", "rest_framework", "channels")) == {}
    # jvm: the connector's jars and the local file system class the job puts on its classpath
    assert _first_party_outside("streaming", ("streaming", "contract", "runtime", "jvm")) == {}
    assert _first_party_outside("jvm", ("jvm", "contract", "runtime")) == {}
    assert _offending("pinot", ("django", "rest_framework", "channels", "pyspark")) == {}
    assert _first_party_outside("pinot", ("pinot", "contract", "runtime")) == {}


def test_the_domain_imports_no_channel_and_not_the_project():
    domain = {
        path: names
        for path, names in _offending("tracker", (*CHANNELS, "config")).items()
        if not path.startswith("tracker/live/")
    }
    assert domain == {}
    # The WebSocket channel does not reach sideways into the other channels either.
    assert _offending("tracker/live", ("api", "frontend", "config")) == {}
    assert _offending("api", ("frontend", "tracker.live", "config")) == {}
    assert _offending("frontend", ("api", "tracker.live", "config")) == {}


def test_the_domain_reaches_pinot_and_spark_only_over_the_wire():
    assert _offending("tracker", ("streaming", "pinot", "pyspark")) == {}
    assert _offending("api", ("streaming", "pinot", "pyspark")) == {}


def test_production_code_imports_nothing_embedded_only():
    for package in PRODUCTION:
        assert _offending(package, ("localrun",)) == {}, package
    manage = ast.parse((ROOT / "manage.py").read_text())
    names = [a.name for n in ast.walk(manage) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(manage) if isinstance(n, ast.ImportFrom)]
    assert "django.core.management" in names
    assert not any(_within(n, ("localrun",)) for n in names)


def test_the_walk_sees_imports_that_point_up():
    """The checks above would pass vacuously if the walk found no imports at all."""
    api = imports_of("api")
    assert "tracker.orders.policy" in api["api/permissions.py"]
    assert "tracker.tracking.serializers" in api["api/serializers/orders.py"]
    assert "contract.events" in imports_of("pinot")["pinot/loader.py"]
    assert "jvm.maven" in imports_of("localrun")["localrun/kafka.py"]
    assert "config.asgi_threads" in imports_of("config")["config/asgi.py"]
    # Relative imports resolve against the package, __init__ included.
    assert "streaming.job" in imports_of("streaming")["streaming/__main__.py"]


def test_importing_the_contract_and_the_plumbing_loads_no_framework():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in ("contract", "runtime")
        for p in (ROOT / package).rglob("*.py")
        if p.name == "__init__.py" or not p.name.startswith("_")
    )
    assert "contract.events" in modules and "runtime.kafka" in modules
    code = (
        "import sys, importlib\n"
        f"for name in {modules!r} + ['pinot.definitions']:\n"
        "    importlib.import_module(name)\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_no_import_cycles_between_modules():
    """No module reaches itself through its imports, at module level or inside functions
    (a function-level import hides a cycle from Python, not from a reader)."""
    graph: dict[str, set[str]] = {}
    for package in (*PRODUCTION, "localrun"):
        for path, names in imports_of(package).items():
            module = ".".join(Path(path).with_suffix("").parts).removesuffix(".__init__")
            graph[module] = names
    known = set(graph)

    def module_of(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges = {
        m: {t for n in names if (t := module_of(n)) is not None and t != m}
        for m, names in graph.items()
    }
    cycles, state = [], {}  # state: 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


#: What makes a bounded map: a cache library, or an ordered dict trimmed by hand.
BOUNDED_MAP_MARKS = ("cachetools", "OrderedDict", "move_to_end", "popitem(last=False)")


def test_only_the_cache_package_caches():
    """One package (``tracker/cache``) talks to Django's cache and defines the bounded maps
    (cachetools'); everything else reaches them through it, so one table (its docstring)
    says everything a process or Redis keeps for reads."""
    talks_to_a_cache = {
        path: names
        for package in PRODUCTION
        for path, names in _offending(package, ("django.core.cache", "cachetools")).items()
        if not path.startswith("tracker/cache/")
    }
    assert talks_to_a_cache == {}
    bounded_by_hand = sorted(
        str(path.relative_to(ROOT))
        for package in PRODUCTION
        for path in (ROOT / package).rglob("*.py")
        if "tracker/cache/" not in path.as_posix()
        and any(mark in path.read_text() for mark in BOUNDED_MAP_MARKS)
    )
    assert bounded_by_hand == []
    assert "django.core.cache" in imports_of("tracker/cache")["tracker/cache/reads.py"]

"""Reading compose files as ``docker compose -f A -f B`` does, for ``make run-prod``.

Each file is parsed on its own (YAML anchors and merge keys stay within a file), its
``${VAR}`` references filled in, then the files are merged in order with compose's rules
for the keys this project's files use:

* a service only a later file names is added;
* ``environment`` and ``depends_on`` are merged key by key (list forms normalised first),
  the later file winning;
* ``command`` and ``entrypoint`` are replaced, ``healthcheck`` merged with its ``test``
  replaced;
* ``volumes`` and ``configs`` are merged by their target path;
* other mappings are merged recursively, other lists appended, scalars replaced.

``extends: {file, service}`` (or a service of the same file) starts a service from
another's definition as that file writes it, without its ``depends_on`` (compose never
shares it), and records which service it extends: a second web process is a ``web``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runtime.conf import BASE_DIR

COMPOSE_FILE = BASE_DIR / "docker-compose.yml"
#: The override with several nodes per engine (docs/operations.md, "on one machine").
CLUSTER_FILE = BASE_DIR / "docker-compose.cluster.yml"

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)")


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's interpolation: ``$$``, ``${X}``, ``${X:-default}``, ``${X:?error}``."""
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        op, arg = match.group(2), match.group(3) or ""
        got = variables.get(name)
        if op in (":-", "-"):
            return got if got not in (None, "") or (op == "-" and got is not None) else arg
        if op in (":?", "?"):
            if got in (None, "") if op == ":?" else got is None:
                raise ValueError(f"compose variable {name}: {arg}")
            return got
        return got or ""

    return _VAR.sub(sub, value)


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _depends(value: Any) -> dict[str, Any]:
    if isinstance(value, list):
        return {name: {"condition": "service_started"} for name in value}
    return dict(value or {})


def _target(item: Any) -> str:
    """A volume's or config's target path (short syntax ``source:target[:mode]``)."""
    if isinstance(item, dict):
        return str(item.get("target") or item.get("source"))
    parts = str(item).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _merge_by_target(base: list[Any], over: list[Any]) -> list[Any]:
    replaced = {_target(item): item for item in over}
    kept = [replaced.pop(_target(item), item) for item in base]
    return kept + list(replaced.values())


def merge_service(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, by compose's merge rules (module docstring)."""
    out = dict(base)
    for key, value in over.items():
        held = out.get(key)
        if key in ("command", "entrypoint") or held is None:
            out[key] = value
        elif key == "environment":
            out[key] = {**service_env(base), **service_env(over)}
        elif key == "depends_on":
            out[key] = {**_depends(held), **_depends(value)}
        elif key in ("volumes", "configs"):
            out[key] = _merge_by_target(list(held), list(value))
        elif key == "healthcheck":
            out[key] = {**held, **value}
        elif isinstance(held, dict) and isinstance(value, dict):
            out[key] = _merge_mapping(held, value)
        elif isinstance(held, list) and isinstance(value, list):
            out[key] = held + [item for item in value if item not in held]
        else:
            out[key] = value
    return out


def _merge_mapping(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        held = out.get(key)
        both = isinstance(held, dict) and isinstance(value, dict)
        out[key] = _merge_mapping(held, value) if both else value
    return out


@dataclass
class Project:
    """The merged files: services, top-level configs, and what each service extends."""

    services: dict[str, dict[str, Any]]
    configs: dict[str, dict[str, Any]]
    #: service -> the service its ``extends`` chain starts from (itself when none)
    roles: dict[str, str]
    files: list[Path]

    def config_sources(self, name: str) -> dict[str, str]:
        """Service ``name``'s config targets -> the local files they are made from."""
        out = {}
        for item in self.services[name].get("configs") or []:
            source = item if isinstance(item, str) else item["source"]
            target = _target(item) if isinstance(item, dict) else f"/{source}"
            path = Path(self.configs[source]["file"])
            out[target] = str(path if path.is_absolute() else self.files[0].parent / path)
        return out


def _read(path: Path, variables: dict[str, str]) -> dict[str, Any]:
    return interpolate(yaml.safe_load(path.read_text()) or {}, variables)


def _resolve(
    name: str, path: Path, variables: dict[str, str], cache: dict[Path, dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """Service ``name`` of file ``path`` with its ``extends`` applied, and its role."""
    if path not in cache:
        cache[path] = _read(path, variables)
    service = dict(cache[path]["services"][name])
    extends = service.pop("extends", None)
    if extends is None:
        return service, name
    if isinstance(extends, str):
        extends = {"service": extends}
    base_path = (path.parent / extends["file"]).resolve() if "file" in extends else path
    base, role = _resolve(extends["service"], base_path, variables, cache)
    base.pop("depends_on", None)  # never shared through extends
    return merge_service(base, service), role


def load_project(variables: dict[str, str], files: list[Path] | None = None) -> Project:
    """``files`` (docker-compose.yml alone by default) merged in order."""
    files = [Path(f).resolve() for f in (files or [COMPOSE_FILE])]
    cache: dict[Path, dict[str, Any]] = {}
    services: dict[str, dict[str, Any]] = {}
    configs: dict[str, dict[str, Any]] = {}
    roles: dict[str, str] = {}
    for path in files:
        document = cache.setdefault(path, _read(path, variables))
        configs.update(document.get("configs") or {})
        for name in document.get("services") or {}:
            service, role = _resolve(name, path, variables, cache)
            held = services.get(name)
            services[name] = service if held is None else merge_service(held, service)
            roles.setdefault(name, role)
    return Project(services, configs, roles, files)


def load_compose(variables: dict[str, str], path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """One file's services, anchors merged and variables filled in."""
    return load_project(variables, [path]).services

"""The OpenAPI schema types every body, so a mobile team can generate a client from it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")


def _untyped(schema: dict[str, Any], components: dict[str, Any], where: str, seen: set) -> list:
    """Every place in ``schema`` that a client generator could only type as 'any'."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return []
        seen.add(name)
        return _untyped(components[name], components, f"{where}->{name}", seen)
    for combinator in ("allOf", "oneOf", "anyOf"):
        if combinator in schema:
            return [
                problem
                for i, part in enumerate(schema[combinator])
                for problem in _untyped(part, components, f"{where}.{combinator}[{i}]", seen)
            ]
    kind = schema.get("type")
    if kind is None and "enum" not in schema:
        return [f"{where}: no type"]
    if kind == "array":
        if "items" not in schema:
            return [f"{where}: array without items"]
        return _untyped(schema["items"], components, f"{where}[]", seen)
    if kind == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if not properties and not isinstance(extra, dict):
            return [f"{where}: object without properties"]
        if isinstance(extra, dict) and not extra:
            return [f"{where}: additionalProperties of any type"]
        problems = []
        for name, prop in (properties or {}).items():
            problems += _untyped(prop, components, f"{where}.{name}", seen)
        if isinstance(extra, dict):
            problems += _untyped(extra, components, f"{where}.*", seen)
        return problems
    return []


@pytest.fixture(scope="module")
def schema(django_db_blocker) -> dict[str, Any]:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def test_every_operation_has_typed_request_and_response_bodies(schema):
    components = schema["components"]["schemas"]
    problems, operations = [], 0
    for path, item in schema["paths"].items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            operations += 1
            where = f"{method.upper()} {path}"
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                problems += _untyped(
                    content.get("schema", {}), components, f"{where} {media}", set()
                )
            for code, response in operation["responses"].items():
                content = response.get("content")
                if content is None:
                    if code != "204":
                        problems.append(f"{where} {code}: no body")
                    continue
                for media, media_content in content.items():
                    problems += _untyped(
                        media_content.get("schema", {}),
                        components,
                        f"{where} {code} {media}",
                        set(),
                    )
    assert operations >= 19
    assert problems == []


def test_every_operation_documents_a_success_response(schema):
    missing = [
        f"{method.upper()} {path}"
        for path, item in schema["paths"].items()
        for method in METHODS
        if method in item and not any(code.startswith("2") for code in item[method]["responses"])
    ]
    assert missing == []

"""The OpenAPI schema types every body, so a mobile team can generate a client from it."""

from __future__ import annotations

import json
import re
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
                    if code not in ("204", "304"):
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


def operations(schema: dict[str, Any]):
    for path, item in schema["paths"].items():
        for method in METHODS:
            if method in item:
                yield f"{method.upper()} {path}", item[method]


def test_every_operation_has_a_unique_camel_case_id_and_a_tag(schema):
    ids = {where: operation["operationId"] for where, operation in operations(schema)}
    assert [i for i in ids.values() if not re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", i)] == []
    assert len(set(ids.values())) == len(ids)
    assert ids["GET /api/v1/orders/"] == "listOrders"
    assert ids["GET /api/v1/orders/{id}/"] == "getOrder"
    assert ids["POST /api/v1/orders/"] == "placeOrder"
    assert ids["POST /api/v1/orders/{id}/advance/"] == "advanceOrder"
    declared = {tag["name"] for tag in schema["tags"]}
    untagged = [w for w, op in operations(schema) if len(op.get("tags", [])) != 1]
    assert untagged == []
    assert {op["tags"][0] for _, op in operations(schema)} == declared


def test_request_bodies_are_json_only(schema):
    media = {
        where: sorted(op["requestBody"]["content"])
        for where, op in operations(schema)
        if "requestBody" in op
    }
    assert media and all(types == ["application/json"] for types in media.values()), media


def test_a_form_encoded_body_is_refused_in_the_error_format(django_user_model):
    response = Client().post(
        "/api/v1/auth/token/", {"username": "alice", "password": "pw"}, HTTP_ACCEPT="*/*"
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_descriptions_are_written_for_api_users(schema):
    text = json.dumps(
        {
            "operations": [
                (op.get("summary"), op.get("description")) for _, op in operations(schema)
            ],
            "components": schema["components"]["schemas"],
        }
    )
    internal = ["Validated data", "context[", "tracker/", "``", ":func:", ":mod:", "Pinot row"]
    assert [phrase for phrase in internal if phrase in text] == []
    assert all(op.get("summary") for _, op in operations(schema))


def test_every_error_an_operation_can_give_is_typed_with_the_error_body(schema):
    problems = []
    for where, op in operations(schema):
        codes = set(op["responses"])
        expected = {"401"}
        if "{" in where:
            expected.add("404")
        if "requestBody" in op:
            expected |= {"400", "413", "415"}
        if any(p["in"] == "query" for p in op.get("parameters", [])):
            expected.add("400")
        if op["operationId"] not in ("signIn", "unsubscribeEmail"):  # no sign-in: no 403
            expected.add("403")
        problems += [f"{where}: no {code}" for code in sorted(expected - codes)]
        for code, response in op["responses"].items():
            if code.startswith(("4", "5")):
                body = response["content"]["application/json"]
                if body["schema"] != {"$ref": "#/components/schemas/Error"}:
                    problems.append(f"{where} {code}: not the Error schema")
                if not body.get("examples"):
                    problems.append(f"{where} {code}: no example")
    assert problems == []
    by_id = {op["operationId"]: op for _, op in operations(schema)}
    assert "409" in by_id["cancelOrder"]["responses"]
    assert "409" in by_id["advanceOrder"]["responses"]
    assert "429" in by_id["placeOrder"]["responses"] and "429" in by_id["signIn"]["responses"]
    assert "503" in by_id["getOrder"]["responses"] and "503" in by_id["listOrders"]["responses"]
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"status", "code", "message"}


def test_the_main_operations_carry_examples(schema):
    by_id = {op["operationId"]: op for _, op in operations(schema)}
    for name in ("signIn", "placeOrder", "advanceOrder", "reportCourierLocations"):
        examples = by_id[name]["requestBody"]["content"]["application/json"]["examples"]
        assert examples, name


def test_polled_reads_are_conditional(schema):
    for path in ("/api/v1/orders/", "/api/v1/orders/{id}/"):
        operation = schema["paths"][path]["get"]
        assert "If-None-Match" in [p["name"] for p in operation["parameters"]]
        assert "304" in operation["responses"]
        assert "ETag" in operation["responses"]["200"]["headers"]

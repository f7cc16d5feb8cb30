"""The AsyncAPI document served at /api/asyncapi/ covers every message and close code the
live consumers send, read from their source, so a new message type fails here until it
is documented."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tracker.live import messages

LIVE = Path(messages.__file__).resolve().parent


def _sent_types() -> set[str]:
    """Every ``{"type": "..."}`` a consumer or the message module builds for a client.

    Channel-layer events (``order.update``, ``websocket.close``) have a dot; they never
    reach a client."""
    found = set()
    for source in LIVE.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (
                        isinstance(key, ast.Constant)
                        and key.value == "type"
                        and isinstance(value, ast.Constant)
                        and "." not in value.value
                    ):
                        found.add(value.value)
    return found


def _close_codes() -> dict[str, set[int]]:
    """Close codes in the live package: all of them, and those sent after an ``error``."""
    constants = {
        name: value
        for name, value in vars(messages).items()
        if name.startswith("CLOSE_") and isinstance(value, int)
    }
    literals = {
        node.value
        for source in LIVE.glob("*.py")
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Constant) and type(node.value) is int and 4000 <= node.value < 5000
    }
    return {"all": set(constants.values()) | literals, "with_error": set(constants.values())}


@pytest.fixture(scope="module")
def document(django_db_blocker) -> dict[str, Any]:
    with django_db_blocker.unblock():
        as_yaml = Client().get("/api/asyncapi/")
        as_json = Client().get("/api/asyncapi/", {"format": "json"})
    assert as_yaml.status_code == 200 and as_yaml["Content-Type"].startswith("application/yaml")
    assert as_json.status_code == 200
    parsed = yaml.safe_load(as_yaml.content)
    assert json.loads(as_json.content) == parsed
    return parsed


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def test_every_message_type_the_consumers_send_is_documented(document):
    documented = {}
    for channel_name, channel in document["channels"].items():
        for message in channel["messages"].values():
            payload = _resolve(document, message["$ref"])["payload"]
            documented.setdefault(payload["properties"]["type"]["const"], set()).add(channel_name)
    sent = _sent_types()
    assert {"snapshot", "update", "status", "error", "heartbeat", "pong", "resumed"} <= sent
    missing = sent - set(documented)
    assert missing == set(), f"add these message types to api/asyncapi.yaml: {missing}"
    assert set(documented) - sent == {"ping"}  # the one a client sends
    assert documented["resumed"] == {"order"}  # only one order's socket resumes


def test_every_close_code_is_documented(document):
    codes = _close_codes()
    assert codes["all"] >= {4400, 4401, 4403, 4404, 4408, 4503}
    assert {int(code) for code in document["x-close-codes"]} == codes["all"]
    error = document["components"]["messages"]["error"]["payload"]["properties"]["code"]
    assert set(error["enum"]) == codes["with_error"]


def test_every_operation_refers_to_messages_of_its_own_channel(document):
    for name, operation in document["operations"].items():
        channel = operation["channel"]["$ref"]
        for message in operation["messages"]:
            assert message["$ref"].startswith(channel + "/messages/"), name
            _resolve(document, message["$ref"])
    assert document["asyncapi"].startswith("3.")


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable`` as JSON Schema's null type, for the validator."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value) for key, value in node.items()}
    if node.pop("nullable", False):
        if "type" in node:
            node["type"] = [node["type"], "null"]
            if "enum" in node:
                node["enum"] = [*node["enum"], None]
        else:
            node = {"anyOf": [{"type": "null"}, node]}
    return node


def _validate(document: dict[str, Any], openapi: dict[str, Any], name: str, sent: dict) -> None:
    """``sent`` matches the documented payload exactly: no undocumented or missing field."""
    payload = document["components"]["messages"][name]["payload"]
    assert set(sent) == set(payload["properties"]), name
    registry = Registry().with_resources(
        [
            (
                "/api/schema/?format=json",
                Resource.from_contents(_json_schema(openapi), DRAFT202012),
            ),
            ("urn:asyncapi", Resource.from_contents(document, DRAFT202012)),
        ]
    )
    schema = {**payload, "$id": "urn:asyncapi#/components/messages/" + name}
    Draft202012Validator(json.loads(json.dumps(schema).replace('"#/', '"urn:asyncapi#/')),
                         registry=registry).validate(json.loads(json.dumps(sent)))  # fmt: skip


def test_the_update_and_status_messages_are_what_the_document_says(document):
    from contract.events import OrderStatusChanged, now_ms
    from tests.fixtures_pinot import order_event

    openapi = json.loads(Client().get("/api/schema/", {"format": "json"}).content)
    t0 = now_ms() - 600_000
    enriched = order_event(
        7, 4, "OUT_FOR_DELIVERY", created_at=t0, status_time=t0 + 300_000,
        courier=(3, 12.97, 77.6, t0 + 310_000), distance_left_km=1.5,
    )  # fmt: skip
    _validate(document, openapi, "update", messages.update_from_enriched(enriched, True))
    changed = OrderStatusChanged(
        event_id="e1", event_time=t0 + 5_000, order_id=7, placed_at=t0,
        status="ORDER_CONFIRMED", previous_status="PLACED_ORDER", customer_id=1, restaurant_id=2,
    )  # fmt: skip
    _validate(document, openapi, "status", messages.status_from_event(changed))

"""Extreme input on every API endpoint (hypothesis): huge numbers, deep nesting, long strings.

Schemathesis (test_api_fuzz.py) generates requests that mostly follow the schema;
this test takes every operation from the same OpenAPI schema and sends bodies,
query parameters and path ids that keep the documented shape but hold extreme
values: integers of hundreds of digits (and beyond Python's 4300-digit limit),
floats at the edge of double precision, strings of up to 200k characters and
arrays or objects nested thousands of levels deep. Whatever arrives, the API
answers in its error format and never with a 5xx.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.accounts.security import user_for_token
from tracker.accounts.services import issue_token

pytestmark = pytest.mark.django_db(transaction=True)


def _nest(depth: int, as_object: bool) -> str:
    """A value nested ``depth`` levels deep, as JSON text (a Python object this deep
    would exhaust the recursion of hypothesis' own printing)."""
    if as_object:
        return '{"a": ' * depth + "0" + "}" * depth
    return "[" * depth + "0" + "]" * depth


HUGE_INTS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64, -(2**63) - 1, 2**31, 0, -1]),
)
EDGE_FLOATS = st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 1e-300])
LONG_STRINGS = st.builds(
    lambda ch, n: ch * n, st.sampled_from(["a", "9", "é", "\u202e", "\x00", "💥"]),
    st.integers(min_value=200, max_value=200_000),
)  # fmt: skip
#: A marker replaced by the nested JSON text when the body is encoded.
DEEP = st.builds(
    lambda depth, obj: f"__DEEP_{depth}_{int(obj)}__",
    st.integers(min_value=33, max_value=5000), st.booleans(),
)  # fmt: skip
_DEEP_MARKER = re.compile(r'"__DEEP_(\d+)_(\d)__"')
EXTREME = st.one_of(HUGE_INTS, EDGE_FLOATS, LONG_STRINGS, DEEP)
ROLES = ("customer", "courier", "operator")
#: Encoded by hand: Python refuses to print an integer over 4300 digits.
RAW_HUGE = st.sampled_from(["9" * 5000, "-" + "1" * 10_000, "1" + "0" * 400 + ".5", "1e999999"])


#: Per operation; three roles each. Bounded so the whole file stays around half a minute.
EXAMPLES = 12


def _resolve(schema: dict, spec: dict) -> dict:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _shaped(schema: dict, spec: dict, depth: int = 0) -> st.SearchStrategy:
    """A value of the schema's shape (objects keep their keys) with extreme leaves."""
    schema = _resolve(schema, spec)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        schema = _resolve(schema["allOf"][0], spec)
    if "enum" in schema:  # mostly valid, so validation reaches the other fields
        valid = st.sampled_from(schema["enum"])
        return st.one_of(valid, valid, valid, EXTREME)
    kind = schema.get("type")
    if kind == "object" and schema.get("properties") and depth < 4:
        props = {name: _shaped(sub, spec, depth + 1) for name, sub in schema["properties"].items()}
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: v for k, v in props.items() if k in required},
            optional={k: v for k, v in props.items() if k not in required},
        )
    if kind == "array" and depth < 4:
        return st.lists(_shaped(schema.get("items", {}), spec, depth + 1), min_size=1, max_size=3)
    if kind is None:  # free-form JSON (GeoJSON coordinates): also rings of extreme positions
        number = st.sampled_from([10**400, -(10**400), 2**64, 1e308, -1e308, 77.6, 12.9])
        rings = st.lists(
            st.lists(st.lists(number, min_size=2, max_size=3), min_size=4, max_size=5),
            min_size=1, max_size=1,
        )  # fmt: skip
        return st.one_of(rings, rings, EXTREME)
    return EXTREME


def _all_huge(schema: dict, spec: dict, depth: int = 0) -> Any:
    """The schema's shape with every number 10**400 (enums valid, strings of 200k)."""
    schema = _resolve(schema, spec)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        schema = _resolve(schema["allOf"][0], spec)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object" and schema.get("properties") and depth < 4:
        return {k: _all_huge(v, spec, depth + 1) for k, v in schema["properties"].items()}
    if kind == "array" and depth < 4:
        return [_all_huge(schema.get("items", {}), spec, depth + 1)]
    if kind == "string":
        return "a" * 200_000
    if kind == "boolean":
        return True
    if kind is None:  # free-form JSON: a GeoJSON ring of huge positions
        return [[[10**400, 10**400], [77.7, 12.9], [77.7, 13.0], [10**400, 10**400]]]
    return 10**400


def _operations(spec: dict) -> list[tuple[str, str, st.SearchStrategy | None, Any, list[str]]]:
    out = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            body_strategy = _shaped(body["schema"], spec) if "schema" in body else None
            huge = _all_huge(body["schema"], spec) if "schema" in body else None
            query = [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]
            out.append((method, path, body_strategy, huge, query))
    return out


def _encode(shaped: Any) -> str:
    return _DEEP_MARKER.sub(lambda m: _nest(int(m[1]), m[2] == "1"), json.dumps(shaped))


def _fixed_bodies(huge: Any) -> list[str]:
    """Every operation gets these: each field 10**400; one field past Python's 4300-digit
    limit; a body nested 100,000 levels; each field nested 5,000 levels."""
    bodies = [json.dumps(huge), "[" * 100_000 + "]" * 100_000]
    if isinstance(huge, dict) and huge:
        for key in huge:
            over = json.dumps({**huge, key: "__RAW__"}).replace('"__RAW__"', "9" * 5000)
            deep = json.dumps({**huge, key: "__RAW__"}).replace('"__RAW__"', _nest(5000, False))
            bodies += [over, deep]
    return bodies


def _assert_error_format(response, where: tuple) -> None:
    assert response.status_code < 500, (*where, response.content[:300])
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), where
        body = response.json()
        assert set(body) == {"error"} and body["error"]["status"] == response.status_code, where


def test_extreme_values_never_get_a_server_error(pinot):
    customer, restaurant = make_customer("fuzz-customer"), make_restaurant()
    courier = make_courier("fuzz-courier")
    order = place(customer, restaurant)
    operator = get_user_model().objects.create_user("fuzz-ops", is_staff=True)
    users = {"customer": customer.user, "courier": courier.user, "operator": operator}
    spec = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operations = _operations(spec)
    assert len(operations) >= 15
    sent = 0
    keys: dict[str, str] = {}

    def call(role: str, method: str, url: str, data: str | None, params: dict) -> None:
        nonlocal sent
        from django.core.cache import cache

        cache.clear()  # throttles must not hide a 5xx
        client = APIClient()
        if role not in keys or user_for_token(keys[role]) is None:  # signing out revokes it
            keys[role] = issue_token(users[role]).key
        token = keys[role]
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        if data is None:
            response = getattr(client, method)(url, params)
        else:
            response = client.generic(method.upper(), url, data, content_type="application/json")
        sent += 1
        _assert_error_format(response, (role, method, url[:80], (data or "")[:80]))

    for method, path, body_strategy, huge, query in operations:
        url = path.replace("{id}", str(order.pk)).replace("{pk}", str(order.pk))
        for data in _fixed_bodies(huge) if body_strategy is not None else []:
            for role in ROLES:
                call(role, method, url, data, {})

        @given(
            body=body_strategy if body_strategy is not None else st.none(),
            path_id=st.one_of(st.just(str(order.pk)), HUGE_INTS.map(str), RAW_HUGE),
            params=st.dictionaries(
                st.sampled_from(query or ["x"]),
                st.one_of(HUGE_INTS.map(str), LONG_STRINGS.map(lambda s: s[:4000]), RAW_HUGE),
                max_size=3,
            ),
        )
        @hsettings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        def check(body, path_id, params):  # called at once: the loop variables are current
            number = path_id.lstrip("-") or "1"
            url = path.replace("{id}", number).replace("{pk}", number)  # noqa: B023
            data = _encode(body) if body_strategy is not None else None  # noqa: B023
            for role in ROLES:
                call(role, method, url, data, params)  # noqa: B023

        check()
    assert sent >= 3 * len(operations) * EXAMPLES

"""Property-based API tests: schemathesis generates requests from the OpenAPI schema.

Whatever it sends (as a customer, a courier and an operator, against the run's
Apache Pinot), the API never answers 5xx and its responses match the schema's
status codes. Bounded by a small example budget so it fits in ``make test``.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from rest_framework.authtoken.models import Token

from config.wsgi import application
from tests.factories import make_courier, make_customer, make_restaurant, place

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api_schema(pinot):
    return schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def tokens(api_schema):
    customer = make_customer("fuzz-customer")
    restaurant = make_restaurant()
    courier = make_courier("fuzz-courier")
    place(customer, restaurant)
    operator = get_user_model().objects.create_user("fuzz-ops", is_staff=True)
    users = {"customer": customer.user, "courier": courier.user, "operator": operator}

    def token(role: str) -> str:  # logout revokes tokens: mint one when it is gone
        return Token.objects.get_or_create(user=users[role])[0].key

    return token


def test_no_generated_request_gets_a_server_error(api_schema, tokens):
    from django.core.cache import cache  # cleared per example: throttles must not mask 5xx

    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 15
    calls = []

    for operation in operations:

        @given(case=operation.as_strategy())
        @hsettings(
            max_examples=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        def check(case):
            cache.clear()
            for role in ("customer", "courier", "operator"):
                response = case.call(headers={"Authorization": f"Token {tokens(role)}"})
                calls.append(response.status_code)
                where = (role, case.method, case.formatted_path, response.status_code)
                assert response.status_code < 500, (*where, response.text[:500])
                if response.status_code >= 400:
                    content_type = response.headers.get("Content-Type") or response.headers.get(
                        "content-type"
                    )
                    if isinstance(content_type, list):
                        content_type = content_type[0]
                    assert (content_type or "").startswith("application/json"), (
                        *where,
                        response.text[:300],
                    )
                    body = response.json()
                    assert set(body) == {"error"}, (*where, body)
                    assert body["error"]["status"] == response.status_code, (*where, body)

        check()
    assert len(calls) >= 3 * len(operations) * 3  # it really exercised every operation
    assert any(code < 300 for code in calls)  # and got past validation, not only 4xx

"""Property-based API tests: schemathesis generates requests from the OpenAPI schema.

Whatever it sends (as a customer, a courier, restaurant staff and an operator, against
the run's Apache Pinot), every schemathesis check passes: no 5xx, answers match the schema,
what the schema allows is not refused with a 400 (positive data) and what it forbids is
(negative data). A generated client trusts the schema, so the two must agree. Bounded by a
small example budget so it fits in ``make test``.
"""

from __future__ import annotations

import re

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi import checks

from config.wsgi import application
from tests.factories import make_courier, make_customer, make_restaurant, place
from tracker.accounts.security import user_for_token
from tracker.accounts.services import issue_token

pytestmark = pytest.mark.django_db(transaction=True)

ROLES = ("customer", "courier", "staff", "operator")

#: What the schema cannot say (OpenAPI 3.0 has no tuples, no references to rows, no clock):
#: a schema-valid request may still get a 400 naming one of these fields, and only these.
BEYOND_THE_SCHEMA = {
    # the restaurant, the saved address and each product must exist (and be yours, on its
    # menu, each once); street and city together must fit one line
    "POST /api/v1/orders/": re.compile(r"restaurant_id|address_id|items(\[\d+\].*)?$"),
    "POST /api/v1/me/addresses/": re.compile(r"line1$"),
    "PUT /api/v1/me/addresses/{id}/": re.compile(r"line1$"),
    "PATCH /api/v1/me/addresses/{id}/": re.compile(r"line1$"),
    # a fix at most 30 s ahead of the server's clock
    "POST /api/v1/orders/{id}/locations/": re.compile(r"(points\[\d+\]\.)?recorded_at$"),
    # a ring is closed and a latitude within ±90
    "POST /api/v1/operations/deliveries-in-area/": re.compile(
        r"(geometry\.)?coordinates\[\d+\](\[\d+\])?$"
    ),
    # a push service's host we know, reached at a public address; a key on the curve
    "POST /api/v1/notifications/subscriptions/": re.compile(r"endpoint$|keys\.p256dh$"),
    # a courier must be free to take the order
    "POST /api/v1/orders/{id}/advance/": re.compile(r"courier$"),
}


def positive_data_acceptance(ctx, response, case):
    """schemathesis's check, but a 400 may name a field :data:`BEYOND_THE_SCHEMA` lets it."""
    try:
        return checks.positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        rule = BEYOND_THE_SCHEMA.get(case.operation.label)
        fields = response.json()["error"].get("fields", {}) if response.status_code == 400 else {}
        if not (rule and fields and all(rule.match(name) for name in fields)):
            raise
        return None


@pytest.fixture
def api_schema(pinot):
    return schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def tokens(api_schema):
    customer = make_customer("fuzz-customer")
    restaurant = make_restaurant()
    courier = make_courier("fuzz-courier")
    staff = get_user_model().objects.create_user("fuzz-staff")
    restaurant.staff.add(staff)
    place(customer, restaurant)
    operator = get_user_model().objects.create_user("fuzz-ops", is_staff=True)
    users = {
        "customer": customer.user,
        "courier": courier.user,
        "staff": staff,
        "operator": operator,
    }

    keys: dict[str, str] = {}

    def token(role: str) -> str:  # signing out revokes tokens: mint one when it is gone
        if role not in keys or user_for_token(keys[role]) is None:
            keys[role] = issue_token(users[role]).key
        return keys[role]

    return token


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_check_passes_for_every_role(api_schema, tokens, mode):
    from django.core.cache import cache  # cleared per example: throttles must not mask 5xx

    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 15
    calls, failures = [], []

    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @hsettings(
            max_examples=8,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        def check(case):
            cache.clear()
            for role in ROLES:
                headers = {"Authorization": f"Token {tokens(role)}"}
                response = case.call_and_validate(  # every check
                    headers=headers,
                    excluded_checks=[checks.positive_data_acceptance],
                    additional_checks=[positive_data_acceptance],
                )
                calls.append(response.status_code)
                if response.status_code >= 400:
                    where = (role, case.method, case.formatted_path, response.status_code)
                    body = response.json()
                    assert set(body) == {"error"}, (*where, body)
                    assert body["error"]["status"] == response.status_code, (*where, body)

        try:
            check()
        except Unsatisfiable:  # negative data for an operation that takes nothing to negate
            assert mode is GenerationMode.NEGATIVE, operation.label
        except (AssertionError, FailureGroup) as failure:  # every operation's, not the first's
            failures.append(f"{operation.label}: {failure!r}")
    assert not failures, "\n\n".join(failures)
    assert len(calls) >= len(ROLES) * len(operations) * 3  # it really exercised every operation
    if mode is GenerationMode.POSITIVE:
        assert any(code < 300 for code in calls)  # and got past validation, not only 4xx

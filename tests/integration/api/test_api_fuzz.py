"""Property-based API tests: schemathesis generates requests from the OpenAPI schema.

Whatever it sends (as a customer, a courier, restaurant staff and an operator, against
the run's Apache Pinot), every schemathesis check passes: no 5xx, answers match the schema,
what the schema allows is not refused with a 400 (positive data) and what it forbids is
(negative data). A generated client trusts the schema, so the two must agree. Bounded by a
small example budget so it fits in ``make test``.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

from config.wsgi import application
from tests.factories import make_courier, make_customer, make_restaurant, place

pytestmark = pytest.mark.django_db(transaction=True)

ROLES = ("customer", "courier", "staff", "operator")


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

    def token(role: str) -> str:  # logout revokes tokens: mint one when it is gone
        return Token.objects.get_or_create(user=users[role])[0].key

    return token


@pytest.mark.xfail(
    strict=True,
    reason="issue 69 fuzz: the schema allows what the server refuses (limit=0, advance to "
    "CANCELLED, open rings, lat/lon with points) and the server takes what it forbids (empty "
    "query values, is_default: 0)",
)
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
                response = case.call_and_validate(headers=headers)  # every check
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

"""One error format for every 4xx/5xx the API returns.

    {"error": {"status": 400, "code": "invalid", "message": "...", "fields": {"items[0].quantity": ["..."]}}}

Mobile clients show ``message`` and highlight ``fields``; ``code`` is stable.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from contract.events import EventValidationError
from runtime.redis_errors import REDIS_UNREACHABLE
from tracker.customers.services import TooManyAddresses
from tracker.notifications.endpoints import Refused as EndpointRefused
from tracker.notifications.services import TooManySubscriptions
from tracker.orders.policy import NotVisible, ScopeRequired
from tracker.orders.services import IllegalTransition, OrderError, TelemetryError
from tracker.sharing.services import ShareRefused
from tracker.tracking.exceptions import TrackingUnavailable

log = logging.getLogger(__name__)

#: ``Retry-After`` of every 503: a database failover, a Pinot server's or Redis's restart
#: or a Kafka leader election is over in seconds, and a client that waits this long
#: between tries does not add to the load of what is coming back.
UNAVAILABLE_RETRY_AFTER_S = 5


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the resource's current state."


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "unavailable"
    default_detail = "Tracking data is temporarily unavailable; retry shortly."


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error dicts/lists -> {"items[0].quantity": ["..."]}.

    DRF reports list items either as a list or as a dict keyed by index; both
    become ``[i]``. A nested ``non_field_errors`` belongs to its parent field.
    """
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
                name = f"{prefix}[{key}]"
            elif key == "non_field_errors" and prefix:
                name = prefix
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            out.update(_flatten(value, name))
    elif isinstance(detail, list):
        if all(not isinstance(v, (dict, list)) for v in detail):
            out[prefix or "non_field_errors"] = [str(v) for v in detail]
        else:
            for index, value in enumerate(detail):
                if value:
                    out.update(_flatten(value, f"{prefix}[{index}]"))
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


def _translate(exc: Exception) -> Exception:
    """Domain errors -> API exceptions with the right status."""
    if isinstance(exc, IllegalTransition):
        error = Conflict(str(exc))
        error.field = exc.field
        return error
    if isinstance(exc, ShareRefused):
        return Conflict(str(exc))
    if isinstance(exc, NotVisible):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, ScopeRequired):
        return exceptions.ValidationError({exc.field: [str(exc)]})
    if isinstance(exc, EndpointRefused):
        return exceptions.ValidationError({"endpoint": [str(exc)]})
    if isinstance(exc, OrderError | TooManyAddresses | TooManySubscriptions):
        return exceptions.ValidationError({exc.field or "non_field_errors": [str(exc)]})
    if isinstance(exc, EventValidationError):
        return exceptions.ValidationError({exc.field: [exc.reason]})
    if isinstance(exc, TrackingUnavailable):
        log.warning("503: %s", exc)  # the answer says only "unavailable"; operators need why
        return ServiceUnavailable()
    if isinstance(exc, TelemetryError):
        return ServiceUnavailable(f"Position not stored: {exc}. Retry; points are idempotent.")
    if isinstance(exc, OperationalError | InterfaceError):
        # The system of record cannot be reached (down, failing over, out of connections):
        # nothing was changed, and the client may try again; not a bug to page anyone for
        # as a 500, though operators see each one.
        log.warning("503: database unavailable: %s", exc)
        return ServiceUnavailable("The system of record is unreachable; retry shortly.")
    if isinstance(exc, REDIS_UNREACHABLE):
        # Redis, where the request budgets are counted, is gone (a throttle raised it): a
        # budget that cannot be counted refuses the request rather than let it through.
        log.warning("503: redis unreachable: %s", exc)
        return ServiceUnavailable("Request budgets cannot be counted right now; retry shortly.")
    return exc


def exception_handler(exc: Exception, context: dict) -> Response | None:
    exc = _translate(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real 500: Django's handler logs it
    detail = response.data
    fields: dict[str, list[str]] = {}
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(detail)
        first_field, first_errors = next(iter(fields.items()))
        message = (
            first_errors[0]
            if first_field == "non_field_errors"
            else f"{first_field}: {first_errors[0]}"
        )
    else:
        message = str(detail.get("detail", detail)) if isinstance(detail, dict) else str(detail)
    codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
    code = codes if isinstance(codes, str) else ("invalid" if fields else "error")
    body = {"error": {"status": response.status_code, "code": code, "message": message}}
    if fields:
        body["error"]["fields"] = fields
    response.data = body
    if response.status_code == 503:
        response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_S)
    return response


@csrf_exempt  # it changes nothing; without this, a POST would get Django's HTML 403
def not_found(request, *args, **kwargs):
    """Unknown paths under /api/ answer in the API's error format, not Django's HTML page."""
    from django.http import JsonResponse

    return JsonResponse(
        {
            "error": {
                "status": 404,
                "code": "not_found",
                "message": f"No API endpoint at {request.path}.",
            }
        },
        status=404,
    )

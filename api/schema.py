"""How the API describes itself in OpenAPI, so client generators take the schema as is.

Every operation names itself (``extend_schema(operation_id=...)`` in the views, camelCase);
this schema class adds what every operation shares: its tag (from the path) and the error
answers it can give, each with the one error body of :mod:`api.errors` (a 429 with its
``Retry-After`` header wherever a throttle of the view applies to the method, and a 503 with
one everywhere: the database or Redis can be unreachable). An operation lists
the errors only it can give (409) itself, through :func:`errors`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import is_list_serializer, is_serializer
from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework.permissions import AllowAny

from api.serializers.errors import ErrorSerializer
from api.throttles import spends_budget

#: Tag of each path's first segment under /api/v1/ (described in SPECTACULAR_SETTINGS).
TAGS = {
    "auth": "Account",
    "me": "Account",
    "restaurants": "Menu",
    "orders": "Orders",
    "notifications": "Notifications",
    "operations": "Operations",
}
_ERRORS = {
    400: ("invalid", "The request is invalid; `fields` names each bad field.",
          "items[0].quantity: Ensure this value is greater than or equal to 1."),
    401: ("not_authenticated", "Not signed in, or the token is wrong or expired.",
          "Authentication credentials were not provided."),
    403: ("permission_denied", "Signed in, but not allowed to do this.",
          "You do not have permission to perform this action."),
    404: ("not_found", "No such resource, or not yours (the same answer).",
          "No Order matches the given query."),
    409: ("conflict", "The order's current status does not allow this.",
          "order 42 is OUT_FOR_DELIVERY; it can no longer be cancelled"),
    413: ("too_large", "The request body is over the size limit.",
          "Request body is over the 1048576-byte limit."),
    415: ("unsupported_media_type", "The request body is not JSON.",
          'Unsupported media type "multipart/form-data" in request.'),
    429: ("throttled", "Too many requests; retry after the `Retry-After` header's seconds.",
          "Request was throttled. Expected available in 42 seconds."),
    503: ("unavailable", "The database, Redis (where budgets are counted), or Pinot for a tracking "
          "read cannot be reached; nothing was changed: retry after the `Retry-After` header's "
          "seconds.",
          "Tracking data is temporarily unavailable; retry shortly."),
}  # fmt: skip
#: The header every 429 and 503 carries: on a 429 DRF's exception handler sets it from the
#: throttle's wait, on a 503 :mod:`api.errors` does.
RETRY_AFTER = {
    "429": {
        "schema": {"type": "integer", "minimum": 1},
        "required": True,
        "description": "Seconds until the budget holds this request again; wait at least this long.",
    },
    "503": {
        "schema": {"type": "integer", "minimum": 1},
        "required": True,
        "description": "Seconds to wait before trying again.",
    },
}


def error_response(status: int) -> OpenApiResponse:
    code, description, message = _ERRORS[status]
    example: dict[str, Any] = {"status": status, "code": code, "message": message}
    if status == 400:
        example["fields"] = {"items[0].quantity": [message.split(": ", 1)[1]]}
    return OpenApiResponse(
        ErrorSerializer,
        description=description,
        examples=[OpenApiExample(code, {"error": example}, response_only=True)],
    )


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error answers particular to one operation, for ``extend_schema(responses=...)``."""
    return {status: error_response(status) for status in statuses}


class AutoSchema(openapi.AutoSchema):
    def get_tags(self) -> list[str]:
        segments = self.path.removeprefix("/api/").split("/")
        first = segments[1] if segments[0].startswith("v") else segments[0]
        return [TAGS.get(first, first.title())]

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for status in self._common_errors():
            if str(status) not in responses:
                responses[str(status)] = self._get_response_for_code(
                    error_response(status), str(status), direction=direction
                )
        return dict(sorted(responses.items()))

    def _common_errors(self) -> list[int]:
        """What any operation like this one can answer, whatever it does."""
        statuses = [401]  # every operation: no or a bad credential (wrong password at sign-in)
        has_body = self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer()
        has_query = any(p.get("in") == "query" for p in self._get_parameters())
        if has_body or has_query:
            statuses.append(400)
        if not any(isinstance(p, AllowAny) for p in self.view.get_permissions()):
            statuses.append(403)
        if "{" in self.path:
            statuses.append(404)
        if has_body:
            statuses += [413, 415]
        if spends_budget(self.view, self.method):
            statuses.append(429)
        statuses.append(503)  # every operation: the database or Redis can be unreachable
        return statuses

    def _get_request_for_media_type(self, serializer: Any, direction: str = "request") -> Any:
        """A body that is one of several shapes (``oneOf``) is required: none matches nothing."""
        schema, required = super()._get_request_for_media_type(serializer, direction)
        shaped = schema and is_serializer(serializer) and not is_list_serializer(serializer)
        component = self.resolve_serializer(serializer, direction) if shaped else None
        return schema, required or bool(component and "oneOf" in component.schema)

    def _get_response_headers_for_code(
        self, status_code: str, direction: str = "response"
    ) -> dict[str, Any]:
        headers = super()._get_response_headers_for_code(status_code, direction)
        if status_code in RETRY_AFTER:
            headers["Retry-After"] = RETRY_AFTER[status_code]
        return headers


class GeoJSONPolygonSchema(OpenApiSerializerExtension):
    """The deliveries-in-area request: a Polygon or a Feature (``oneOf``) of linear rings."""

    target_class = "api.serializers.operations.GeoJSONPolygonSerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        """The Polygon is one named component, referenced by both shapes: inline twice,
        generated clients name both copies alike and drop one."""
        from drf_spectacular.plumbing import ResolvedComponent

        from api.serializers.operations import GEOJSON_POLYGON_SCHEMA, POLYGON_SCHEMA

        polygon = ResolvedComponent(
            name="GeoJSONPolygon",
            type=ResolvedComponent.SCHEMA,
            object="GeoJSONPolygon",
            schema=POLYGON_SCHEMA,
        )
        auto_schema.registry.register_on_missing(polygon)
        shapes = [
            polygon.ref if shape is POLYGON_SCHEMA else _with_geometry(shape, polygon.ref)
            for shape in GEOJSON_POLYGON_SCHEMA["oneOf"]
        ]
        return {**GEOJSON_POLYGON_SCHEMA, "oneOf": shapes}


def _with_geometry(shape: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    return {**shape, "properties": {**shape["properties"], "geometry": ref}}


class LocationBatchSchema(OpenApiSerializerExtension):
    """The courier's report: one point (``lat``/``lon``) or a batch (``points``), never both:
    a ``oneOf`` whose shapes exclude each other's fields, as the server does."""

    target_class = "api.serializers.orders.LocationBatchSerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        from api.serializers.orders import LocationBatchSerializer, LocationPointSerializer

        point = auto_schema.resolve_serializer(LocationPointSerializer, direction).ref
        batch = auto_schema._map_serializer_field(
            LocationBatchSerializer().fields["points"], direction
        )
        from drf_spectacular.plumbing import ResolvedComponent

        points = ResolvedComponent(  # named, so a generated client's model has a plain name
            name="LocationPointsRequest",
            type=ResolvedComponent.SCHEMA,
            object="LocationPointsRequest",
            schema={
                "type": "object",
                "properties": {"points": batch},
                "required": ["points"],
                "not": {"anyOf": [{"required": ["lat"]}, {"required": ["lon"]}]},
            },
        )
        auto_schema.registry.register_on_missing(points)
        return {
            "description": LocationBatchSerializer.__doc__,
            "oneOf": [{"allOf": [point], "not": {"required": ["points"]}}, points.ref],
        }

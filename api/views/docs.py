"""The API's contracts: the OpenAPI schema (built once per process) and the live channel's
AsyncAPI document."""

from __future__ import annotations

import json
import threading
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import translation
from django.views.decorators.http import require_safe
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.request import Request
from rest_framework.response import Response

from tracker.accounts.security import content_security_policy

ASYNCAPI = Path(__file__).resolve().parent.parent / "asyncapi.yaml"


@cache
def asyncapi_document() -> dict[str, Any]:
    return yaml.safe_load(ASYNCAPI.read_text())


@require_safe
def asyncapi(request: HttpRequest) -> HttpResponse:
    """YAML as written, or JSON with ``?format=json``."""
    if request.GET.get("format") == "json":
        return HttpResponse(json.dumps(asyncapi_document()), content_type="application/json")
    return HttpResponse(ASYNCAPI.read_bytes(), content_type="application/yaml; charset=utf-8")


class SchemaView(SpectacularAPIView):
    """``/api/schema/``: the OpenAPI document, built on the first request and then served
    from memory. It is the same for every caller (``SERVE_PUBLIC``), so only its version
    and language could change it: one copy per version the API allows and per configured
    language, the others served as the default. Served from memory to anyone: no budget."""

    throttle_classes: list = []
    _built: dict[tuple[str | None, str | None], dict] = {}
    _lock = threading.Lock()

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version
        language = translation.get_language()
        key = (version, language if language in dict(settings.LANGUAGES) else None)
        with self._lock:  # concurrent first requests build it once
            schema = self._built.get(key)
            if schema is None:
                generator = self.generator_class(
                    urlconf=self.urlconf, api_version=version, patterns=self.patterns
                )
                schema = generator.get_schema(request=request, public=self.serve_public)
                self._built[key] = schema
        filename = self._get_filename(request, version)
        return Response(schema, headers={"Content-Disposition": f'inline; filename="{filename}"'})


#: What Swagger UI needs beyond the strict policy: its inline style sheet, ``data:`` images.
SWAGGER_UI_NEEDS = {"style-src": "'unsafe-inline'", "img-src": "data:"}


class SwaggerView(SpectacularSwaggerSplitView):
    """``/api/docs/``: Swagger UI, its start-up script served by this view as a file
    (``?script``) rather than inline, so the page keeps the strict policy's ``script-src
    'self'``. Swagger UI brings an inline style sheet and ``data:`` images of its own: its
    page, and only it, allows those (config/middleware.py gives every other answer the
    strict policy)."""

    throttle_classes: list = []  # a static page and its script

    @extend_schema(exclude=True)  # not an API operation
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        response.headers["Content-Security-Policy"] = content_security_policy(
            relaxed=SWAGGER_UI_NEEDS
        )
        return response

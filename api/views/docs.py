"""The live channel's contract: the AsyncAPI document, served next to the OpenAPI schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

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

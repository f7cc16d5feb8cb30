"""Conditional GETs: an ``ETag`` on every read a client polls, and 304 when it still matches.

A polled resource's tag is computed from what its answer depends on, before the answer
is built (:func:`answer`, Django's ``condition()`` idiom: ``get_conditional_response``),
and only after the caller's access to it was checked, so a 304 never says that something
exists. What changes each tag is listed in docs/api.md. A resource without such a
validator is tagged with its body's hash (:func:`conditional_response`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.http import HttpResponseBase
from django.utils.cache import get_conditional_response, patch_vary_headers
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response

IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    str,
    OpenApiParameter.HEADER,
    description="The `ETag` of the answer you have: 304 with no body while it is still current.",
)
ETAG = OpenApiParameter(
    "ETag",
    str,
    OpenApiParameter.HEADER,
    response=[200, 304],  # a list: drf-spectacular reads any other type as "every response"
    description="Names this answer; send it back as `If-None-Match`.",
)
NOT_MODIFIED = OpenApiResponse(description="Not modified: what you have (its `ETag`) is current.")


def quoted(validator: str) -> str:
    """A validator as an ETag header's strong tag."""
    return f'"{validator}"'


def tag_of(body: bytes) -> str:
    """The ETag of a body's bytes."""
    return quoted(hashlib.blake2b(body, digest_size=16).hexdigest())


def etag_of(data: Any) -> str:
    return tag_of(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode())


def tagged(response: HttpResponseBase, etag: str) -> HttpResponseBase:
    """``response`` with ``etag``, to be revalidated before each use, by one viewer only."""
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"  # per user; revalidate before each use
    patch_vary_headers(response, ("Authorization", "Cookie"))
    return response


def not_modified(request: Request, etag: str) -> HttpResponseBase | None:
    """304 when ``If-None-Match`` names ``etag`` (or is ``*``), else None. Call it after
    the access check."""
    response = get_conditional_response(request, etag=etag)
    return None if response is None else tagged(response, etag)


def answer(request: Request, etag: str, build: Callable[[], Any]) -> HttpResponseBase:
    """304 when ``If-None-Match`` names ``etag``, without calling ``build``; else the body
    ``build()`` returns, tagged ``etag``. Call it after the access check."""
    return not_modified(request, etag) or tagged(Response(build()), etag)


def conditional_response(request: Request, data: Any, etag: str | None = None) -> Response:
    """``data`` with its ETag (``etag``, when the caller has it, else its hash), or 304
    when ``If-None-Match`` names it."""
    etag = etag or etag_of(data)
    return answer(request, etag, lambda: data)

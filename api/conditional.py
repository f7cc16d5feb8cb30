"""Conditional GETs: an ``ETag`` on every read a client polls, and 304 when it still matches.

The tag is a hash of the body, so it changes exactly when anything the client would render
changes (the read model keeps its bodies free of clock-relative values for this). The body
is still computed, so a 304 saves the client's download and parsing, not the server's read.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.utils.cache import patch_vary_headers
from django.utils.http import parse_etags
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
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


def etag_of(data: Any) -> str:
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return '"' + hashlib.blake2b(body.encode(), digest_size=16).hexdigest() + '"'


def conditional_response(request: Request, data: Any) -> Response:
    """``data`` with its ETag, or 304 when ``If-None-Match`` names it (or is ``*``)."""
    etag = etag_of(data)
    wanted = parse_etags(request.headers.get("If-None-Match", ""))
    weak = {tag.removeprefix("W/") for tag in wanted}  # GET compares weakly (RFC 9110 13.1.2)
    if "*" in wanted or etag in weak:
        response = Response(status=status.HTTP_304_NOT_MODIFIED)
    else:
        response = Response(data)
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"  # per user; revalidate before each use
    patch_vary_headers(response, ("Authorization", "Cookie"))
    return response

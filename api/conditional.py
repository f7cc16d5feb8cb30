"""Conditional GETs: an ``ETag`` on every read a client polls, and 304 when it still matches.

The tag is a hash of the body, so it changes exactly when anything the client would render
changes (the read model keeps its bodies free of clock-relative values for this). A
resource read often (an order's detail) keeps its last rendition (:class:`Renditions`):
while the read model's answer is equal to the one it was rendered from, the body and its
tag are reused, so an unchanged order costs neither its serializer nor its hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Hashable
from typing import Any

from django.utils.cache import patch_vary_headers
from django.utils.http import parse_etags
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.renderers import Rendered
from tracker.cache.maps import LOCK, bounded

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


def tag_of(body: bytes) -> str:
    """The ETag of a body's bytes."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def etag_of(data: Any) -> str:
    return tag_of(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode())


class Renditions:
    """The last body (with its JSON, :class:`api.renderers.Rendered`) and ETag rendered for
    each resource, reused while the read model answers with an equal value (equality, not a version number: whatever the body
    shows, from any store, is compared). Bodies are shared by every request: never
    changed after rendering."""

    def __init__(self, size: int, render: Callable[[Any], Any]) -> None:
        self._kept = bounded(size)
        self._render = render

    def rendition(self, key: Hashable, source: Any) -> tuple[Any, str]:
        """(body, ETag) of ``source``, the resource under ``key`` as just read."""
        with LOCK:
            kept = self._kept.get(key)
        if kept is not None and (kept[0] is source or kept[0] == source):
            return kept[1], kept[2]
        data = Rendered(self._render(source))
        etag = tag_of(data.json)
        with LOCK:
            self._kept[key] = (source, data, etag)
        return data, etag


def conditional_response(request: Request, data: Any, etag: str | None = None) -> Response:
    """``data`` with its ETag (``etag``, when the caller has it), or 304 when
    ``If-None-Match`` names it (or is ``*``)."""
    etag = etag or etag_of(data)
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

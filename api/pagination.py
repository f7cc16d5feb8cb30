"""Limit/offset pages over a Pinot query.

No total count: it would cost a second query on every page, and a list that
grows while it is read has no stable count anyway. ``next`` is set while a page
comes back full.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from api.serializers.fields import QuerySerializer


class PageQuerySerializer(QuerySerializer):
    limit = serializers.IntegerField(min_value=1, max_value=100, default=20)
    offset = serializers.IntegerField(min_value=0, max_value=100_000, default=0)


class PinotPagination(LimitOffsetPagination):
    """Limit/offset pages over a Pinot query: the selector fetches one page, never all rows."""

    default_limit = 20
    max_limit = 100

    def paginate_query(
        self, fetch: Callable[..., Sequence[Any]], request: Request
    ) -> Sequence[Any]:
        """One page of ``fetch(limit=, offset=)``; out-of-range parameters are a 400."""
        query = PageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        self.request = request
        self.limit, self.offset = query.validated_data["limit"], query.validated_data["offset"]
        self.page = fetch(limit=self.limit, offset=self.offset)
        return self.page

    def get_next_link(self) -> str | None:
        if len(self.page) < self.limit:
            return None
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.offset_query_param, self.offset + self.limit)

    def get_paginated_response(self, data: Any) -> Response:
        return Response(
            {
                "results": data,
                "limit": self.limit,
                "offset": self.offset,
                "next": self.get_next_link(),
            }  # fmt: skip
        )

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """``limit`` and ``offset`` with the bounds :class:`PageQuerySerializer` holds them to."""
        fields = PageQuerySerializer().fields
        return [
            {
                "name": name,
                "required": False,
                "in": "query",
                "description": description,
                "schema": {
                    "type": "integer",
                    "minimum": fields[name].min_value,
                    "maximum": fields[name].max_value,
                    "default": fields[name].default,
                },
            }
            for name, description in (
                (self.limit_query_param, "Number of results to return per page."),
                (self.offset_query_param, "The initial index from which to return the results."),
            )
        ]

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["results", "limit", "offset", "next"],
            "properties": {
                "results": schema,
                "limit": {"type": "integer"},
                "offset": {"type": "integer"},
                "next": {"type": "string", "format": "uri", "nullable": True},
            },
        }

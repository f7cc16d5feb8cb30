"""The API's JSON parser: DRF's, plus a nesting limit.

Python's JSON decoder recurses, so ``[[[[...]]]]`` a few thousand levels deep
raises RecursionError, which DRF's parser does not catch (a 500); a shallower
but still absurd nesting would hit the same limit later, in a serializer. No
request of this API nests deeper than a GeoJSON polygon (4 levels), so anything
beyond ``MAX_JSON_DEPTH`` is a 400.
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_JSON_DEPTH = 32


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        if _too_deep(data, MAX_JSON_DEPTH):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        return data

"""The API's one renderer: DRF's JSON, plus bodies whose JSON is already made.

A detail read often is rendered once per change (:mod:`tracker.cache.bodies`);
its body travels as :class:`Rendered`, a dict for everything that reads a response's
``data`` (tests, middleware) that carries its own bytes, so each request of an unchanged
order skips ``json.dumps`` (about a millisecond for a trail of 200 points).
"""

from __future__ import annotations

from typing import Any

from rest_framework import renderers


class Rendered(dict):
    """A response body as a dict, with its JSON as this renderer would make it."""

    __slots__ = ("json",)

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.json = JSONRenderer().render(data)


class JSONRenderer(renderers.JSONRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: dict[str, Any] | None = None,
    ) -> bytes:
        if type(data) is Rendered and not self.get_indent(
            accepted_media_type or "", renderer_context or {}
        ):
            return data.json
        return super().render(data, accepted_media_type, renderer_context)

"""Conditional GETs decide before building: a matching tag answers 304 without the body."""

from __future__ import annotations

from django.test import RequestFactory
from rest_framework.request import Request

from api.conditional import answer

TAG = '"abc"'


def _answer(**headers: str) -> tuple[int, list[str]]:
    built: list[str] = []
    request = Request(RequestFactory().get("/x", headers=headers))
    response = answer(request, TAG, lambda: built.append("built") or {"n": 1})
    assert response["ETag"] == TAG and response["Cache-Control"] == "private, no-cache"
    return response.status_code, built


def test_a_matching_tag_answers_304_without_building_the_body():
    assert _answer(if_none_match=TAG) == (304, [])
    assert _answer(if_none_match=f'W/"other", W/{TAG}') == (304, [])  # weak comparison
    assert _answer(if_none_match="*") == (304, [])


def test_any_other_tag_or_none_builds_the_body():
    assert _answer(if_none_match='"other"') == (200, ["built"])
    assert _answer() == (200, ["built"])

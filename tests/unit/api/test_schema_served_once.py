"""``/api/schema/`` is built once per process, not on every anonymous request (issue 53, L6).

Building the OpenAPI document walks every view and serializer (hundreds of
milliseconds); anyone may ask for it, unthrottled, so it must cost a build at most once.
"""

from __future__ import annotations

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


def test_the_schema_is_built_at_most_once_per_process(monkeypatch):
    builds = []
    real = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        builds.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    answers = [Client().get("/api/schema/", {"format": "json"}) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].content == answers[2].content
    assert len(builds) <= 1
    yaml = Client().get("/api/schema/")  # the same document, in YAML
    assert yaml.status_code == 200 and b"openapi: 3" in yaml.content
    assert len(builds) <= 1

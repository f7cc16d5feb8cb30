"""Operators can list dead letters: the reason and the original bytes, newest first."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from contract.events import DeadLetter, topic_name
from runtime import kafka

pytestmark = pytest.mark.django_db


def _letters(n: int) -> None:
    producer = kafka.producer()
    for i in range(n):
        letter = DeadLetter.for_message(
            topic=topic_name("orders"), partition=0, offset=i, key=b"42", value=b"{broken %d" % i,
            reason=f"value: not valid JSON ({i})",
        )  # fmt: skip
        producer.produce(topic_name("dead_letters"), key=b"42", value=letter.to_json())
    assert producer.flush(10) == 0


def test_operator_lists_dead_letters_with_reason_and_original(kafka_topics, capsys):
    _letters(3)
    operator = get_user_model().objects.create_user("ops", is_staff=True)
    client = APIClient()
    client.force_authenticate(operator)
    response = client.get("/api/v1/operations/dead-letters/?limit=2")
    body = response.json()
    assert [(d["original"], d["key"]) for d in body["results"]] == [
        ("{broken 2", "42"),
        ("{broken 1", "42"),
    ]
    assert body["results"][0]["reason"] == "value: not valid JSON (2)"
    customer = get_user_model().objects.create_user("someone")
    client.force_authenticate(customer)
    assert client.get("/api/v1/operations/dead-letters/").status_code == 403
    call_command("dead_letters", limit=5)
    out = capsys.readouterr().out
    assert out.count("not valid JSON") == 3 and "{broken 0" in out

"""What every message on a topic shares: the schema version in its JSON, and for the
events, the id, time and order key of every event (:class:`Event`); plus the dead
letter, the one message that is not an event but carries an unusable one."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from datetime import datetime
from typing import ClassVar

from contract.rules import EVENT_TIME, ID, Rule, Serializable, now_ms, ruled
from contract.topics import Topic

SCHEMA_VERSION = 1


def epoch_ms(moment: datetime) -> int:
    """An aware datetime as the contract's time: integer epoch milliseconds."""
    return int(moment.timestamp() * 1000)


def new_event_id() -> str:
    """A new event's id: a random UUID4, as text."""
    return str(uuid.uuid4())


class Message(Serializable):
    """A record that is a whole message on a topic: its JSON names the schema version."""

    def to_json(self) -> bytes:
        body = {"schema_version": SCHEMA_VERSION, **self.to_dict()}
        return json.dumps(body, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class Event(Message):
    """Fields common to every event on every topic."""

    TOPIC: ClassVar[Topic]
    #: Fields this topic's records once carried and no longer do: read and dropped, so
    #: records written before the change (still on the topic) stay readable.
    RETIRED: ClassVar[frozenset[str]] = frozenset()

    event_id: str = ruled(Rule(uuid=True))
    event_time: int = ruled(EVENT_TIME)
    order_id: int = ruled(ID)

    def key(self) -> bytes:
        """The Kafka message key: all events of one order share a partition."""
        return str(self.order_id).encode()


@dataclasses.dataclass(frozen=True)
class DeadLetter(Message):
    """Topic ``dead_letters``: an input that could not be used, with why and its bytes."""

    event_id: str
    event_time: int
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    key_b64: str | None
    value_b64: str

    @classmethod
    def for_message(
        cls,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> DeadLetter:
        return cls(
            event_id=new_event_id(),
            event_time=now_ms(),
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            reason=reason,
            key_b64=base64.b64encode(key).decode() if key is not None else None,
            value_b64=base64.b64encode(value or b"").decode(),
        )

    def original_value(self) -> bytes:
        return base64.b64decode(self.value_b64)

    def key(self) -> bytes | None:
        return base64.b64decode(self.key_b64) if self.key_b64 is not None else None

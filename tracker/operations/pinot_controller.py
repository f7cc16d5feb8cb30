"""What Pinot's controller says of the enriched tables: how far its servers have consumed
each topic, and which segments fewer servers serve than it assigned.

Pinot's consumers commit nothing to Kafka, and a lost server changes no stage's lag while
its replicas serve, so the pipeline monitor asks the controller (``PINOT_CONTROLLER_URL``)
for both. Each table is named after the topic it consumes (the event contract;
``tests/unit/contract/test_pinot_tables_contract.py``). A :class:`PinotController` keeps one HTTP client,
so a monitor sampling every few seconds reuses its connections.
"""

from __future__ import annotations

from typing import Any

import httpx

from contract.events import ENRICHED_TOPICS, topic_name
from runtime.conf import env_str
from tracker.operations.replicas import segments_short


class PinotController:
    """The controller's answers; every method raises ``httpx.HTTPError`` (or ValueError on
    an answer that is not JSON) when it cannot be asked."""

    def __init__(self, url: str | None = None, timeout: float = 3.0) -> None:
        self.url = url or env_str("PINOT_CONTROLLER_URL", "http://127.0.0.1:9000")
        self._client = httpx.Client(timeout=timeout)

    def __enter__(self) -> PinotController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        answer = self._client.get(f"{self.url}{path}", params=params)
        answer.raise_for_status()
        return answer.json()

    def positions(self) -> dict[str, dict[int, int]]:
        """How far Pinot has consumed each enriched topic: topic -> partition -> next
        offset (the lowest over replicas), from ``consumingSegmentsInfo``."""
        out: dict[str, dict[int, int]] = {}
        for topic in ENRICHED_TOPICS:
            info = self._get(f"/tables/{topic.value}/consumingSegmentsInfo")
            mine = out.setdefault(topic_name(topic), {})
            for replicas in (info.get("_segmentToConsumingInfoMap") or {}).values():
                for report in replicas or []:
                    for partition, offset in _consuming_offsets(report).items():
                        try:
                            p, o = int(partition), int(offset)
                        except (TypeError, ValueError):
                            continue
                        mine[p] = min(o, mine.get(p, o))
        return out

    def segments_short(self) -> int:
        """:func:`~tracker.operations.replicas.segments_short` over every enriched table:
        the ideal state against the external view."""
        count = 0
        for topic in ENRICHED_TOPICS:
            views = [
                self._get(f"/tables/{topic.value}/{view}", {"tableType": "REALTIME"}).get(
                    "REALTIME"
                )
                or {}
                for view in ("idealstate", "externalview")
            ]
            count += segments_short(*views)
        return count


def _consuming_offsets(info: dict[str, Any]) -> dict[str, str]:
    """partition -> offset in one server's report on a consuming segment (Pinot 0.11 and
    later forms)."""
    found = info.get("partitionToOffsetMap")
    if not found:
        found = (info.get("partitionOffsetInfo") or {}).get("currentOffsetsMap") or {}
    return found

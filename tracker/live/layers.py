"""The in-process channel layer (embedded mode), with expiry sweeps that do not grow per message.

Channels' ``InMemoryChannelLayer`` sweeps every channel and every group membership for
expired entries on each ``receive`` and each ``group_send``. Every open socket waits in
``receive`` and joins two groups, so with N sockets each pushed update costs O(N) before
it reaches its one socket. Expiry is counted in seconds (messages: ``expiry``, 60 s; memberships:
``group_expiry``, a day), so sweeping at most once per ``SWEEP_SECONDS`` expires the
same entries at most that much later and makes a push cost O(group size).
"""

from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer


class SweepingInMemoryChannelLayer(InMemoryChannelLayer):
    """Channels' in-memory layer, sweeping expired entries at most once per ``SWEEP_SECONDS``."""

    #: Longest wait between two sweeps for expired messages and memberships.
    SWEEP_SECONDS = 1.0

    _swept_at = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < self.SWEEP_SECONDS:
            return
        self._swept_at = now
        super()._clean_expired()

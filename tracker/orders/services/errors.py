"""Why an order command, or a courier's GPS point, was refused (the API maps each to its
status: 400/409 for the first two, 503 for telemetry)."""

from __future__ import annotations


class OrderError(Exception):
    """A command was refused; ``field`` names the input at fault when there is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class IllegalTransition(OrderError):
    """The lifecycle does not allow the requested status change."""


class TelemetryError(Exception):
    """The broker did not acknowledge a courier position."""

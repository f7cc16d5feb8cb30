"""Errors of the tracking read path."""

from __future__ import annotations


class TrackingUnavailable(RuntimeError):
    """Pinot could not answer (unreachable, timed out or returned an error).

    The API turns it into HTTP 503: tracking data is temporarily unavailable,
    which is different from "this order does not exist" (404).
    """

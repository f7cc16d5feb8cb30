"""Rates written as ``"10/min"``: parsed once here, for every throttle and the settings
checks (no Django import, so ``config.settings`` can use it)."""

from __future__ import annotations

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """``"10/min"`` -> (10, 60)."""
    count, _, period = rate.partition("/")
    try:
        return int(count), _PERIODS[period.strip().lower()]
    except (ValueError, KeyError):
        raise ValueError(f"rate must look like '10/min', got {rate!r}") from None


def outlasts(larger: str, smaller: str) -> bool:
    """Whether ``larger`` allows more than ``smaller`` in one window and over time, so a
    client spending all of ``smaller`` cannot spend all of ``larger``."""
    (big, big_period), (small, small_period) = parse_rate(larger), parse_rate(smaller)
    return big > small and big / big_period > small / small_period

"""How times and money look in what clients are sent, in one place.

Times are ISO-8601 UTC strings with milliseconds; money is a decimal string ("18.50"),
whether it comes from the database (Decimal) or from Pinot (a float column, rounded
to cents here).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def money(value: Decimal | float | None) -> str | None:
    if value is None:
        return None
    return str(Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP))


def iso_ms(ms: int | None) -> str | None:
    """Epoch millis (Pinot) -> ISO-8601 UTC with milliseconds."""
    if ms is None:
        return None
    return iso(datetime.fromtimestamp(ms / 1000, tz=UTC))


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

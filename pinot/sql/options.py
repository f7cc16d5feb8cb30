"""Query options (``SET``, ``OPTION(...)``, ``queryOptions``) and Pinot's duration and
date-format notations.
"""

from __future__ import annotations

import re

from pinot.sql.errors import QUERY_EXECUTION_ERROR, SQL_PARSING_ERROR, QueryError, unsupported

# ------------------------------------------------------------------ options

_SET = re.compile(r"^\s*SET\s+(\w+)\s*=\s*('[^']*'|\"[^\"]*\"|[\w.]+)\s*;", re.I)
_OPTION = re.compile(r"\boption\s*\(([^()]*)\)\s*;?\s*$", re.I)
_KNOWN_OPTIONS = {"skipupsert", "timeoutms", "usemultistageengine", "enablenullhandling"}


def _option_value(raw: str) -> str:
    return raw.strip().strip("'\"").strip()


def parse_options(sql: str, query_options: str | None) -> tuple[str, dict[str, str]]:
    """Strip ``SET k = v;`` prefixes and a trailing ``OPTION(...)``; merge all options."""
    options: dict[str, str] = {}
    for part in (query_options or "").split(";"):
        if part.strip():
            if "=" not in part:
                raise QueryError(SQL_PARSING_ERROR, f"bad query option {part!r}")
            key, value = part.split("=", 1)
            options[key.strip().lower()] = _option_value(value)
    while match := _SET.match(sql):
        options[match.group(1).lower()] = _option_value(match.group(2))
        sql = sql[match.end() :]
    if match := _OPTION.search(sql):
        for part in match.group(1).split(","):
            if "=" not in part:
                raise QueryError(SQL_PARSING_ERROR, f"bad OPTION entry {part!r}")
            key, value = part.split("=", 1)
            options[key.strip().lower()] = _option_value(value)
        sql = sql[: match.start()]
    for key, value in options.items():
        if key not in _KNOWN_OPTIONS:
            raise unsupported(f"query option {key!r}")
        if key in ("usemultistageengine", "enablenullhandling") and value.lower() != "false":
            raise unsupported(f"query option {key}={value}")
    return sql.strip().rstrip(";"), options


def _is_true(value: str | None) -> bool:
    return (value or "").lower() == "true"


# ------------------------------------------------------------------ durations / formats

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?$",
    re.I,
)


def duration_ms(text: str) -> int:
    """ISO-8601 duration (Java ``Duration.parse`` forms Pinot's ``ago`` accepts) in ms."""
    match = _DURATION.match(text.strip())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise QueryError(QUERY_EXECUTION_ERROR, f"Invalid ISO-8601 duration for ago(): {text!r}")
    d, h, m, s = (match.group(k) for k in "dhms")
    total = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(m or 0) * 60) * 1000
    return total + round(float(s or 0) * 1000)


_JODA = [
    ("yyyy", "%Y"),
    ("YYYY", "%Y"),  # Joda: Y is year-of-era, equal to y for AD dates
    ("MM", "%m"),
    ("dd", "%d"),
    ("HH", "%H"),
    ("mm", "%M"),
    ("ss", "%S"),
    ("SSS", "%g"),
]


def joda_to_strftime(pattern: str) -> str:
    """Translate the Joda date pattern subset used with ToDateTime into strftime."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise QueryError(QUERY_EXECUTION_ERROR, f"unterminated quote in {pattern!r}")
            literal = pattern[i + 1 : end] or "'"
            out.append(literal.replace("%", "%%"))
            i = end + 1
            continue
        if ch.isalpha():
            for token, fmt in _JODA:
                if pattern.startswith(token, i):
                    out.append(fmt)
                    i += len(token)
                    break
            else:
                raise unsupported(f"ToDateTime pattern letter {ch!r} in {pattern!r}")
            continue
        out.append("%%" if ch == "%" else ch)
        i += 1
    return "".join(out)

"""Logging for every process: ``LOG_FORMAT=json`` (one JSON object per record, for
production log shippers), and secrets kept out of every line.

A shared tracking link's token is its path (``/t/<token>/``, ``/ws/share/<token>/``), and
an old app may still put its API token in a socket's query string (``?token=``, refused
since issue 69), a browser its one-time socket ticket (``?ticket=``). Paths are logged in
places we do not own: Django's ``django.request`` ("Not Found: /t/...") and runserver's
request lines, uvicorn's WebSocket handshake lines (written even with ``--no-access-log``)
and its access log when someone turns it on. So the redaction sits where every record is
made (:func:`keep_secrets_out`, a log record factory), not on one handler: whichever
logger and handler a record goes through, the token is already gone from it.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import time
from collections.abc import Mapping
from typing import Any

#: A share token in a page or socket path, and an API token or socket ticket in a query.
_SECRETS = re.compile(r"(/t/|/ws/share/)[^/?#\s\"'<>]+|([?&](?:token|ticket)=)[^&#\s\"'<>]+")
_MARKERS = ("/t/", "/ws/share/", "token=", "ticket=")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with every share-link token, query-string API token and ticket replaced."""
    if not any(marker in text for marker in _MARKERS):
        return text
    return _SECRETS.sub(lambda m: (m.group(1) or m.group(2)) + REDACTED, text)


def _redact_value(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


def scrub(record: logging.LogRecord) -> None:
    """Take secrets out of ``record``: from each text argument in place (so formatters that
    read the arguments, like uvicorn's access log, still find them), then, if the formatted
    message still has one (in the message itself, or an object's text), from the message as
    a whole; and from the traceback's text."""
    if isinstance(record.args, tuple):
        record.args = tuple(_redact_value(arg) for arg in record.args)
    elif isinstance(record.args, Mapping):
        record.args = {key: _redact_value(arg) for key, arg in record.args.items()}
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed record is logging's to report, not ours
        return
    if redact(message) != message:
        record.msg, record.args = redact(message), ()
    if record.exc_info and record.exc_info[0] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        if redact(text) != text:
            record.exc_text = redact(text)  # formatters use it instead of formatting again


_installed = False


def keep_secrets_out() -> None:
    """Scrub every log record this process makes, from now on (once per process)."""
    global _installed
    if _installed:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        scrub(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


def configure(config: dict[str, Any]) -> None:
    """Django's ``LOGGING_CONFIG``: the ``LOGGING`` dict, and :func:`keep_secrets_out`."""
    logging.config.dictConfig(config)
    keep_secrets_out()


class JSONFormatter(logging.Formatter):
    converter = time.gmtime  # UTC, as the "Z" says

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, default=str)

"""``LOG_FORMAT=json``: one JSON object per log record, for production log shippers."""

from __future__ import annotations

import json
import logging
import time


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
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)

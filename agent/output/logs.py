"""Log output: one bounded line per event (:class:`OneLine`), as text for people or JSON for collectors."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


#: Longest message a log line carries (exceptions' tracebacks come on their own lines, as logging prints them).
MAX_MESSAGE_CHARS = 4096


class OneLine(logging.Filter):
    """Cut each message to MAX_MESSAGE_CHARS and (``escape_breaks``) escape its line breaks."""

    def __init__(self, escape_breaks: bool) -> None:
        super().__init__()
        self._escape_breaks = escape_breaks

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        breaks = self._escape_breaks and ("\n" in message or "\r" in message)
        if breaks or len(message) > MAX_MESSAGE_CHARS:
            if breaks:
                message = message.replace("\r", "\\r").replace("\n", "\\n")
            if len(message) > MAX_MESSAGE_CHARS:
                message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message)} characters)"
            record.msg, record.args = message, None
        return True


def log_handler(stream: TextIO, fmt: str) -> logging.Handler:
    """The agent's handler: one line per record on ``stream``, as ``text`` or ``json``."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(OneLine(escape_breaks=fmt != "json"))
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    return handler


def setup_logging(level: str, fmt: str) -> None:
    """Configure the root logger once for the process."""
    handler = log_handler(sys.stderr, fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

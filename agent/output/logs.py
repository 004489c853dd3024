"""Log output: one bounded line per event (:func:`one_line`), as text for people or JSON for collectors."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
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


def one_line(escape_breaks: bool) -> Callable[[logging.LogRecord], bool]:
    """A logging filter: cut each message to MAX_MESSAGE_CHARS and (``escape_breaks``) escape its line breaks."""

    def bound(record: logging.LogRecord) -> bool:
        message = original = record.getMessage()
        if escape_breaks:
            message = message.replace("\r", "\\r").replace("\n", "\\n")
        if len(message) > MAX_MESSAGE_CHARS:
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message)} characters)"
        if message != original:
            record.msg, record.args = message, None
        return True

    return bound


def log_handler(stream: TextIO, fmt: str) -> logging.Handler:
    """The agent's handler: one line per record on ``stream``, as ``text`` or ``json``."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(one_line(escape_breaks=fmt != "json"))
    text = logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    handler.setFormatter(JsonFormatter() if fmt == "json" else text)
    return handler


def setup_logging(level: str, fmt: str) -> None:
    """Configure the root logger once for the process."""
    root = logging.getLogger()
    root.handlers[:] = [log_handler(sys.stderr, fmt)]
    root.setLevel(level.upper())

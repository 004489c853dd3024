"""gRPC's own log record of a request it could not decode, as one bounded line.

grpc-python's asyncio servers (the device plugin's and the DRA plugin's) log every request
whose bytes do not parse as the method's message with the whole traceback (about 3 KB each),
as ``Unexpected [DecodeError] raised by servicer method [...]`` on ``grpc._cython.cygrpc``.
Anything that can reach a socket could fill the log that way. The
filter here rewrites such a record into one warning line naming the method (where gRPC
says it) and what the parser said, cut to a bounded length, without the traceback; gRPC
still answers the call with its error status. Every other record passes unchanged.

:func:`bound_undecodable_request_logs` installs it once per process; each server calls
it before it serves.
"""

from __future__ import annotations

import logging
import re

from google.protobuf.message import DecodeError

from agent.errors import shown

#: The loggers grpc-python's asyncio server reports undecodable requests on.
GRPC_LOGGERS = ("grpc._cython.cygrpc",)
_METHOD = re.compile(r"servicer method \[(/[!-~]{1,200})\]")


class UndecodableRequestLine(logging.Filter):
    """Rewrites gRPC's traceback of an undecodable request into one bounded warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, DecodeError):
            return True
        method = _METHOD.search(record.getMessage())
        where = f" to {method.group(1)}" if method else ""
        record.msg = "gRPC: refused an undecodable request%s: %s"
        record.args = (where, shown(str(error)))
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        return True


_FILTER = UndecodableRequestLine()


def bound_undecodable_request_logs() -> None:
    """Put the filter on gRPC's loggers (once; calling again changes nothing)."""
    for name in GRPC_LOGGERS:
        grpc_logger = logging.getLogger(name)
        if _FILTER not in grpc_logger.filters:
            grpc_logger.addFilter(_FILTER)

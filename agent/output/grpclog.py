"""gRPC's traceback-laden log record of a request it could not decode, as one bounded warning line.

:func:`bound_undecodable_request_logs` installs the filter; each gRPC server calls it before it serves."""

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

"""gRPC's traceback-laden log record of a request it could not decode, as one bounded warning line.

:func:`bound_undecodable_request_logs` installs the filter; each gRPC server calls it before it serves."""

from __future__ import annotations

import logging
import re

from google.protobuf.message import DecodeError

from agent.errors import shown

_METHOD = re.compile(r"servicer method \[(/[!-~]{1,200})\]")


def undecodable_request_line(record: logging.LogRecord) -> bool:
    """A logging filter: rewrites gRPC's traceback of an undecodable request into one bounded warning line."""
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


def bound_undecodable_request_logs() -> None:
    """Put the filter on the logger grpc-python's asyncio server reports undecodable requests on (once; calling
    again changes nothing)."""
    grpc_logger = logging.getLogger("grpc._cython.cygrpc")
    if undecodable_request_line not in grpc_logger.filters:
        grpc_logger.addFilter(undecodable_request_line)

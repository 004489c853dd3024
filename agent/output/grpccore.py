"""gRPC core's own stderr log lines kept to errors (GRPC_VERBOSITY, set before grpc is imported)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: gRPC core's verbosity as the agent runs it: errors only (gRPC has no warning level).
GRPC_CORE_VERBOSITY = "ERROR"


def quiet_grpc_core(environ: MutableMapping[str, str] = os.environ) -> None:
    """Keep gRPC core's own lines to errors (call before grpc is imported); not when GRPC_TRACE is set."""
    if not environ.get("GRPC_TRACE"):
        environ["GRPC_VERBOSITY"] = GRPC_CORE_VERBOSITY

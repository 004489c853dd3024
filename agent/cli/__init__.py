"""The command line, ``fpga-agent``: ``main`` dispatching to one module per subcommand, ``flags`` shared options."""

from __future__ import annotations

import os
from collections.abc import MutableMapping


def quiet_grpc_core(environ: MutableMapping[str, str] = os.environ) -> None:
    """Keep gRPC core's own stderr lines to errors (it has no warning level); not when GRPC_TRACE is set."""
    if not environ.get("GRPC_TRACE"):
        environ["GRPC_VERBOSITY"] = "ERROR"


quiet_grpc_core()  # before any subcommand's module imports grpc

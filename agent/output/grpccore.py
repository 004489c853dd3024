"""gRPC core's own log lines kept to errors, so that the agent's output is its own log lines.

gRPC's C core writes its lines (``I1206 ... chttp2_transport.cc:1403] ... Got goaway``) to
stderr itself, past Python's logging, at the verbosity GRPC_VERBOSITY gives when grpc is
imported; gRPC knows no level between INFO and ERROR. :func:`quiet_grpc_core` sets ERROR
before anything imports grpc (``agent.cli`` calls it first), whatever the environment says,
unless GRPC_TRACE asks for gRPC's tracing (then the environment's verbosity is kept).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: gRPC core's verbosity as the agent runs it: errors only (gRPC has no warning level).
GRPC_CORE_VERBOSITY = "ERROR"


def quiet_grpc_core(environ: MutableMapping[str, str] = os.environ) -> None:
    """Keep gRPC core's own lines to errors (call before grpc is imported); not when GRPC_TRACE is set."""
    if not environ.get("GRPC_TRACE"):
        environ["GRPC_VERBOSITY"] = GRPC_CORE_VERBOSITY

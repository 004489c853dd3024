"""The command line, ``fpga-agent``: one module per subcommand, each with its own options.

``main`` parses the command line and dispatches; ``flags`` holds the options and the
parser pieces the subcommands share; ``node`` (run, discover), ``extender``, ``catalog``,
``push``, ``certs``, ``cluster`` and ``demo`` are the subcommands (the narrated demos
themselves are in :mod:`agent.demo`).
"""

from agent.output.grpccore import quiet_grpc_core

quiet_grpc_core()  # before any subcommand's module imports grpc

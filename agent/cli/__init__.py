"""The command line, ``fpga-agent``: ``main`` dispatching to one module per subcommand, ``flags`` shared options."""

from agent.output.grpccore import quiet_grpc_core

quiet_grpc_core()  # before any subcommand's module imports grpc

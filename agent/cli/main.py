"""Command line: ``fpga-agent <command>``, dispatched to the subcommands :data:`COMMANDS` lists.

Errors reach the user as one line, ``fpga-agent <command>: <problem>``: exit 2 for a bad option or
configuration, 1 for anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, NamedTuple, NoReturn, cast

from agent import __version__
from agent.cli.catalog import add_catalog_command, run_catalog
from agent.cli.certs import add_certs_command, run_certs
from agent.cli.cleanupgrant import add_cleanup_grant_command, run_cleanup_grant
from agent.cli.cluster import add_cluster_command, run_cluster
from agent.cli.demo import add_demo_command, run_demo_command
from agent.cli.extender import add_extender_command, run_extender_command
from agent.cli.flags import Subparsers
from agent.cli.node import add_discover_command, add_run_command, run_discover, run_run
from agent.cli.uninstall import add_uninstall_command, run_uninstall
from agent.errors import ConfigError, FpgaSlotError


class Command(NamedTuple):
    """A subcommand: its name, how it adds its parser, how it runs (parsed arguments -> exit code)."""

    name: str
    add: Callable[[Subparsers], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: tuple[Command, ...] = (
    Command("run", add_run_command, run_run),
    Command("discover", add_discover_command, run_discover),
    Command("catalog", add_catalog_command, run_catalog),
    Command("cluster", add_cluster_command, run_cluster),
    Command("extender", add_extender_command, run_extender_command),
    Command("certs", add_certs_command, run_certs),
    Command("cleanup-grant", add_cleanup_grant_command, run_cleanup_grant),
    Command("uninstall", add_uninstall_command, run_uninstall),
    Command("demo", add_demo_command, run_demo_command),
)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands report unknown arguments with their own usage, not the top one's, and
    record their prog in the parsed arguments (a subcommand's defaults win), so that errors can name the command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(command_prog=self.prog)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def package_version() -> str:
    """The installed distribution's version (the source tree's when not installed)."""
    try:
        return metadata.version("fpga-slot")
    except metadata.PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="fpga-agent",
        description="FPGA partial-reconfiguration slots for Kubernetes: the node agent (device plugin or "
        "DRA driver), the scheduler extender, and tools around them.",
        epilog="Every option also reads an FPGA_AGENT_* environment variable (shown in each command's --help); "
        "precedence: flag > environment > --config file > default.",
    )
    parser.add_argument("--version", action="version", version=f"fpga-agent {package_version()}")
    # Every nested parser is a CommandParser too (argparse makes subparsers of the parent's class).
    commands = cast(Subparsers, parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    for command in COMMANDS:
        command.add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {command.name: command.run for command in COMMANDS}[args.command](args)
    except FpgaSlotError as exc:
        print(f"{args.command_prog}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except BrokenPipeError:
        # The reader (e.g. `discover | head`) went away: stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""``fpga-agent extender``: the scheduler extender kube-scheduler calls over HTTP."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

import agent.cli.flags as cliflags
from agent.config import Config


def add_extender_command(commands: cliflags.Subparsers) -> None:
    extender = commands.add_parser(
        "extender",
        help="run the scheduler extender (HTTP, called by kube-scheduler)",
        description="Serve /prioritize (and /filter) for kube-scheduler, scoring nodes by the slot state their "
        "agents publish. Credentials are found as kubectl finds them: --kubeconfig, $KUBECONFIG, "
        "~/.kube/config, in-cluster.",
    )
    cliflags.add_option_groups(extender, cliflags.EXTENDER)


def run_extender_command(args: argparse.Namespace) -> int:
    config = cliflags.command_config(args)
    with asyncio.Runner(loop_factory=loop_factory(config.event_loop)) as runner:
        runner.run(serve_until_signal(config))
    return 0


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``--event-loop`` names: uvloop's, or None for asyncio's own."""
    import uvloop

    return uvloop.new_event_loop if name == "uvloop" else None


async def serve_until_signal(config: Config) -> None:
    """The scheduler extender: serve until SIGTERM or SIGINT, then close connections and the watch."""
    from agent.cluster.extenderservice import run_extender  # the extender's code: loaded by this command only

    await run_extender(config, cliflags.stop_on_signals())

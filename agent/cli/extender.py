"""``fpga-agent extender``: the scheduler extender kube-scheduler calls over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import signal

import agent.cli.flags as cliflags
from agent.cluster.extenderservice import run_extender
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
    asyncio.run(serve_until_signal(config))
    return 0


async def serve_until_signal(config: Config) -> None:
    """The scheduler extender: serve until SIGTERM or SIGINT, then close connections and the watch."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await run_extender(config, stop)

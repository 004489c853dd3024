"""``fpga-agent demo [device-plugin | extender | pull | dra]``: the product's halves on simulated parts, narrated.

The real code over real sockets in a temporary directory: no root, no cluster, no hardware. Options
a demo cannot honour are refused up front, naming the option.
"""

from __future__ import annotations

import argparse
import asyncio

import agent.cli.flags as cliflags
from agent.config import Config
from agent.errors import ConfigError

DEMOS = {
    "device-plugin": "the device-plugin lifecycle against a kubelet stand-in (the default)",
    "extender": "the scheduler extender scoring six nodes over HTTP",
    "pull": "a bitstream pushed to a registry, declared, and pulled into a node's catalog",
    "dra": "the DRA driver: its ResourceSlice, claims prepared and released through a kubelet stand-in",
}
#: The demos that run the agent on simulated slots (and so take the --sim-* options), with the slots they hold at
#: once and what holds them: the device-plugin demo's pods four, two of them on one card; the DRA demo's claims
#: two (one prepared, one refused on another slot).
MIN_SLOTS = {"device-plugin": (4, "the demo's pods"), "dra": (2, "the dra demo's claims")}
MIN_SLOTS_PER_CARD = 2
SIM_FLAGS = ("sim_cards", "sim_slots_per_card", "sim_program_ms")


def add_demo_command(commands: cliflags.Subparsers) -> None:
    demo = commands.add_parser(
        "demo",
        help="the lifecycle on simulated slots with a kubelet stand-in; no root, no cluster",
        description="Run a narrated demo on simulated parts: "
        + "; ".join(f"{name}: {text}" for name, text in DEMOS.items())
        + ".",
    )
    demo.add_argument(
        "which",
        nargs="?",
        default="device-plugin",
        # checked after parsing, so that an unknown option is reported as such, not as a demo name
        metavar="{" + ",".join(DEMOS) + "}",
        help="which demo (default: device-plugin)",
    )
    cliflags.add_option_groups(demo, cliflags.DEMO)


def check_demo_options(args: argparse.Namespace, config: Config) -> None:
    """Refuse what the chosen demo cannot do (ConfigError naming the option)."""
    which = args.which
    if which not in DEMOS:
        raise ConfigError(f"no demo named {which!r}: choose from {', '.join(DEMOS)}")
    given = [name for name in SIM_FLAGS if getattr(args, name) is not None]
    if which not in MIN_SLOTS:
        if given:
            raise ConfigError(f"--{given[0].replace('_', '-')}: only the device-plugin and dra demos simulate slots")
        return
    if which == "device-plugin" and config.sim_slots_per_card < MIN_SLOTS_PER_CARD:
        raise ConfigError(
            f"--sim-slots-per-card: the demo's first pod takes {MIN_SLOTS_PER_CARD} slots of one card, "
            f"got {config.sim_slots_per_card}"
        )
    least, holders = MIN_SLOTS[which]
    if config.sim_cards * config.sim_slots_per_card < least:
        raise ConfigError(
            f"--sim-cards x --sim-slots-per-card: {holders} hold {least} slots at once, "
            f"got {config.sim_cards} x {config.sim_slots_per_card}"
        )


def run_demo_command(args: argparse.Namespace) -> int:
    config = cliflags.command_config(args)
    check_demo_options(args, config)
    if args.which == "pull":
        from agent.demo.pull import run_pull_demo

        return asyncio.run(run_pull_demo())
    if args.which == "extender":
        from agent.demo.extender import run_extender_demo as run
    elif args.which == "dra":
        from agent.demo.dra import run_dra_demo as run
    else:
        from agent.demo.deviceplugin import run_demo as run
    return asyncio.run(run(config))

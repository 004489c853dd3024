"""``fpga-agent run`` (the node agent daemon) and ``fpga-agent discover`` (the node's slots, once)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

import agent.cli.flags as cliflags
from agent.app import Agent, connect_kube
from agent.config import Config
from agent.node.backend import build_backend, log_enumeration
from agent.output.tables import format_table
from agent.programming.catalog import Catalog
from agent.programming.simsample import add_sample_bitstream

logger = logging.getLogger(__name__)


def add_run_command(commands: cliflags.Subparsers) -> None:
    run = commands.add_parser(
        "run",
        help="run the node agent (device plugin or DRA driver) until SIGTERM",
        description="Run the node agent: discover the node's FPGA slots, serve them to the kubelet "
        "(device-plugin mode: the extended resource example.com/fpga-slot; dra mode: the DRA driver "
        "fpga.example.com) and program each slot with the bitstream its pod asks for.",
    )
    cliflags.add_option_groups(run, cliflags.RUN)


def run_run(args: argparse.Namespace) -> int:
    asyncio.run(run_agent(cliflags.command_config(args)))
    return 0


async def run_agent(config: Config) -> None:
    """The daemon: run until SIGTERM or SIGINT, then clean up and return."""
    stop = cliflags.stop_on_signals()
    logger.info("fpga-agent starting on node %s (backend %s)", config.node_name, config.backend)
    catalog = Catalog(config.bitstream_dir)
    if config.backend == "sim" and config.sim_sample_bitstream:
        await asyncio.to_thread(add_sample_bitstream, catalog)
    await Agent(config, catalog=catalog, kube=connect_kube(config)).run(stop)


def add_discover_command(commands: cliflags.Subparsers) -> None:
    discover = commands.add_parser(
        "discover",
        help="list the FPGA slots this node has, once",
        description="List the FPGA slots the backend finds on this node (and any device it skips), then exit.",
    )
    discover.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cliflags.add_option_groups(discover, cliflags.DISCOVER)


def run_discover(args: argparse.Namespace) -> int:
    asyncio.run(discover(cliflags.command_config(args), as_json=args.json))
    return 0


async def discover(config: Config, as_json: bool) -> None:
    """Print the node's slots (and skipped devices) once; say plainly when there are none."""
    backend = build_backend(config)
    enumeration = await backend.source.enumerate()
    rows: list[dict[str, object]] = [
        {
            "id": slot.id,
            "card": slot.card,
            "numa": slot.numa,
            "device": ",".join(node.host_path for node in slot.device_nodes),
            "platform": slot.platform,
            "loaded": slot.loaded,
            "health": slot.health.value,
            "reason": slot.reason,
        }
        for slot in enumeration.slots
    ]
    skipped = [{"device": s.device, "reason": s.reason} for s in enumeration.skipped]
    if as_json:
        print(json.dumps({"backend": backend.source.name, "slots": rows, "skipped": skipped}, indent=2))
        return
    if enumeration.slots:
        log_enumeration(backend.source, enumeration)
    print(format_table(["id", "card", "numa", "device", "platform", "loaded", "health"], rows))
    for entry in skipped:
        print(f"skipped {entry['device']}: {entry['reason']}")
    if not enumeration.slots:
        print(
            f"no FPGA slots on this node: backend {backend.source.name} found no usable DFL port, FPGA-manager "
            "region or static slot (--backend sim simulates some)",
            file=sys.stderr,
        )

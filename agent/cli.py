"""Command line: ``fpga-agent run | discover | demo``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence

from agent.app import Agent, build_backend, log_enumeration
from agent.config import Config, add_arguments, load_config
from agent.errors import FpgaSlotError
from agent.logsetup import setup_logging
from agent.slots import Slot

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fpga-agent", description="FPGA slot device plugin for Kubernetes")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the node agent (device plugin daemon)")
    add_arguments(run)
    discover = commands.add_parser("discover", help="list the slots this node has")
    add_arguments(discover)
    discover.add_argument("--json", action="store_true", help="print JSON instead of a table")
    demo = commands.add_parser("demo", help="the whole lifecycle on simulated slots with a kubelet stand-in")
    add_arguments(demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(vars(args))
    except FpgaSlotError as exc:
        print(f"fpga-agent: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level, config.log_format)
    try:
        if args.command == "run":
            asyncio.run(run_agent(config))
        elif args.command == "discover":
            asyncio.run(discover(config, as_json=args.json))
        else:
            from agent.demo import run_demo

            return asyncio.run(run_demo(config))
    except FpgaSlotError as exc:
        logger.error("%s", exc)
        return 1
    except BrokenPipeError:
        # The reader (e.g. `discover | head`) went away: stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


async def run_agent(config: Config) -> None:
    """The daemon: run until SIGTERM or SIGINT, then clean up and return."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    logger.info("fpga-agent starting on node %s (backend %s)", config.node_name, config.backend)
    await Agent(config).run(stop)


def slot_row(slot: Slot) -> dict[str, object]:
    """One slot as the discover command prints it."""
    return {
        "id": slot.id,
        "card": slot.card,
        "numa": slot.numa,
        "device": ",".join(node.host_path for node in slot.device_nodes),
        "platform": slot.platform,
        "loaded": slot.loaded,
        "health": slot.health.value,
        "reason": slot.reason,
    }


async def discover(config: Config, as_json: bool) -> None:
    """Print the node's slots (and skipped devices) once."""
    backend = build_backend(config)
    enumeration = await backend.source.enumerate()
    rows = [slot_row(slot) for slot in enumeration.slots]
    skipped = [{"device": s.device, "reason": s.reason} for s in enumeration.skipped]
    if as_json:
        print(json.dumps({"backend": backend.source.name, "slots": rows, "skipped": skipped}, indent=2))
        return
    log_enumeration(backend.source, enumeration)
    print(format_table(["id", "card", "numa", "device", "platform", "loaded", "health"], rows))
    for entry in skipped:
        print(f"skipped {entry['device']}: {entry['reason']}")


def format_table(columns: list[str], rows: list[dict[str, object]]) -> str:
    """A plain aligned text table; None prints as '-'."""
    cells = [[("-" if row.get(col) is None else str(row.get(col))) for col in columns] for row in rows]
    widths = [max([len(col.upper())] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    lines = ["  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


if __name__ == "__main__":
    sys.exit(main())

"""Command line: ``fpga-agent run | discover | catalog | cluster | extender | certs | demo``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from agent import clusterview
from agent.app import Agent, build_backend, connect_kube, log_enumeration, run_extender
from agent.certscommand import add_certs_command, run_certs
from agent.config import Config, add_arguments, load_config
from agent.errors import FpgaSlotError, KubeError
from agent.kube import SLOTS_ANNOTATION, build_api_client, list_nodes
from agent.logsetup import setup_logging
from agent.programming.catalog import Catalog
from agent.pushcommand import add_push_command, run_push
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
    add_catalog_commands(commands)
    add_cluster_command(commands)
    extender = commands.add_parser("extender", help="run the scheduler extender (HTTP, called by kube-scheduler)")
    add_arguments(extender)
    add_certs_command(commands)
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
        elif args.command == "catalog":
            return run_catalog(config, args)
        elif args.command == "cluster":
            return run_cluster(config, args)
        elif args.command == "certs":
            return run_certs(args)
        elif args.command == "extender":
            asyncio.run(run_scheduler_extender(config))
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
    await Agent(config, catalog=Catalog(config.bitstream_dir), kube=connect_kube(config)).run(stop)


async def run_scheduler_extender(config: Config) -> None:
    """The scheduler extender: serve until SIGTERM or SIGINT, then close connections and the watch."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await run_extender(config, stop)


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


def add_catalog_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``catalog list`` and ``catalog add``: the bitstreams in --bitstream-dir; ``catalog push`` to a registry."""
    catalog = commands.add_parser("catalog", help="the node's bitstream catalog (--bitstream-dir)")
    actions = catalog.add_subparsers(dest="catalog_command", required=True)
    listing = actions.add_parser("list", help="list the bitstreams and any unusable records")
    add_arguments(listing)
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add = actions.add_parser("add", help="copy a bitstream file into the catalog")
    add_arguments(add)
    add.add_argument("file", type=Path, metavar="FILE", help="bitstream file (Intel GBS or raw)")
    add.add_argument("--name", required=True, help="name pods ask for: [a-z0-9][a-z0-9._-]*, at most 63 characters")
    add.add_argument("--platform", help="PR interface id it fits (read from the header of a GBS file)")
    add.add_argument("--accelerator-id", help="id the slot reports once loaded (read from the header of a GBS file)")
    add.add_argument("--replace", action="store_true", help="replace a bitstream of the same name")
    add_push_command(actions)


def run_catalog(config: Config, args: argparse.Namespace) -> int:
    """Run a catalog command; a catalog error prints one line naming the problem and returns 1."""
    if args.catalog_command == "push":
        return run_push(args)
    catalog = Catalog(config.bitstream_dir)
    try:
        if args.catalog_command == "add":
            entry = catalog.add(
                args.file, args.name, platform=args.platform, accelerator_id=args.accelerator_id, replace=args.replace
            )
            print(
                f"added {entry.name}: {entry.size} bytes, sha256 {entry.sha256}, platform {entry.platform}, "
                f"accelerator {entry.accelerator_id} ({catalog.directory / entry.file})"
            )
            return 0
        scan = catalog.scan()
    except FpgaSlotError as exc:
        print(f"fpga-agent catalog {args.catalog_command}: {exc}", file=sys.stderr)
        return 1
    problems = [{"record": problem.record, "reason": problem.reason} for problem in scan.problems]
    if args.json:
        bitstreams = [asdict(entry) for entry in scan.entries]
        print(
            json.dumps({"directory": str(catalog.directory), "bitstreams": bitstreams, "problems": problems}, indent=2)
        )
        return 0
    rows: list[dict[str, object]] = [
        {**asdict(entry), "accelerator": entry.accelerator_id, "sha256": entry.sha256[:12]} for entry in scan.entries
    ]
    print(format_table(["name", "platform", "accelerator", "size", "sha256", "added_at"], rows))
    for problem in problems:
        print(f"skipped {problem['record']}: {problem['reason']}", file=sys.stderr)
    if not scan.entries and not problems:
        print(f"no bitstreams in {catalog.directory}", file=sys.stderr)
    return 0


def add_cluster_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cluster``: the slot map of every node, from the node annotations the agents publish."""
    cluster = commands.add_parser("cluster", help="slots of every node: platform, loaded bitstream, free/held, health")
    cluster.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (env FPGA_AGENT_KUBECONFIG); default: $KUBECONFIG, ~/.kube/config, in-cluster",
    )
    cluster.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cluster.add_argument("--all", action="store_true", help="also list nodes that publish no slot state")
    cluster.add_argument(
        "--files",
        action="store_true",
        help="list each node's bitstream files instead (its catalog, added by hand or pulled: no download there)",
    )


def run_cluster(config: Config, args: argparse.Namespace) -> int:
    """Print the cluster's slot map; 1 with one line naming the problem when the nodes cannot be read."""
    kubeconfig = clusterview.find_kubeconfig(config.kubeconfig, os.environ, Path.home())
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retry warnings: the one error line says it
    try:
        api_client = build_api_client(kubeconfig)
        try:
            nodes = list_nodes(api_client)
        finally:
            api_client.close()  # type: ignore[no-untyped-call]
    except KubeError as exc:
        print(f"fpga-agent cluster: {exc}", file=sys.stderr)
        return 1
    views = clusterview.cluster_views(nodes, include_unpublished=args.all)
    if args.json:
        print(json.dumps(clusterview.json_document(views), indent=2))
        return 0
    rows = clusterview.file_rows(views) if args.files else clusterview.table_rows(views)
    if rows:
        columns = clusterview.FILE_COLUMNS if args.files else clusterview.table_columns(rows)
        print(format_table(columns, rows))
    unpublished = sum(1 for node in nodes if SLOTS_ANNOTATION not in node.annotations)
    if not views:
        print(f"no node publishes FPGA slot state ({len(nodes)} nodes)", file=sys.stderr)
    elif unpublished and not args.all:
        print(f"nodes without published FPGA slot state: {unpublished} (--all lists them)", file=sys.stderr)
    return 0


def format_table(columns: list[str], rows: list[dict[str, object]]) -> str:
    """A plain aligned text table; None prints as '-'."""
    cells = [[("-" if row.get(col) is None else str(row.get(col))) for col in columns] for row in rows]
    widths = [max([len(col.upper())] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    lines = ["  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


if __name__ == "__main__":
    sys.exit(main())

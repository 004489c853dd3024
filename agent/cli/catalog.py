"""``fpga-agent catalog list | add | push``: the node's bitstream catalog, and publishing to a registry."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import agent.cli.flags as cliflags
from agent.cli.push import add_push_command, run_push
from agent.errors import CatalogError
from agent.files.bitstream import SCOPES, SLOT_SCOPE, normalize_id128
from agent.output.tables import format_table
from agent.programming.catalog import Catalog


def accelerator_id(raw: str) -> str:
    """An accelerator id given by hand: 32 hex digits (a 128-bit id; UUID dashes allowed), as slots report it."""
    value = normalize_id128(raw)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"must be 32 hex digits (the 128-bit id the slot reports once loaded, UUID dashes allowed), got {raw!r}"
        )
    return value


def add_catalog_command(commands: cliflags.Subparsers) -> None:
    catalog = commands.add_parser(
        "catalog",
        help="the node's bitstream catalog: list, add; push to an OCI registry",
        description="The bitstreams this node can program (in --bitstream-dir), and publishing one to a registry.",
    )
    actions = catalog.add_subparsers(dest="catalog_command", required=True, metavar="{list,add,push}")
    listing = actions.add_parser(
        "list", help="list the bitstreams and any unusable records", description="List the catalog's bitstreams."
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cliflags.add_option_groups(listing, cliflags.CATALOG)
    add = actions.add_parser(
        "add",
        help="copy a bitstream file into the catalog",
        description="Copy FILE into the catalog as NAME, with its size, sha256, platform and accelerator id.",
    )
    add.add_argument("file", type=Path, metavar="FILE", help="bitstream file (Intel GBS or raw)")
    bitstream = add.add_argument_group("bitstream")
    bitstream.add_argument(
        "--name", required=True, help="name pods ask for: [a-z0-9][a-z0-9._-]*, at most 63 characters"
    )
    bitstream.add_argument(
        "--platform", help="PR interface id it fits (default: read from a GBS file's header; a raw file needs it)"
    )
    bitstream.add_argument(
        "--accelerator-id",
        type=accelerator_id,
        help="32 hex digits the slot reports once loaded (default: read from a GBS file's header; a raw file needs it)",
    )
    bitstream.add_argument(
        "--scope",
        choices=SCOPES,
        default=SLOT_SCOPE,
        help="an image for one slot, or for a whole card of the platform (DRA mode) (default: %(default)s)",
    )
    bitstream.add_argument("--replace", action="store_true", help="replace a bitstream of the same name")
    cliflags.add_option_groups(add, cliflags.CATALOG)
    add_push_command(actions)


def run_catalog(args: argparse.Namespace) -> int:
    """Run a catalog command; a catalog error is one line naming the problem (exit 1)."""
    if args.catalog_command == "push":
        return run_push(args)
    catalog = Catalog(cliflags.command_config(args).bitstream_dir)
    if args.catalog_command == "add":
        entry = catalog.add(
            args.file,
            args.name,
            platform=args.platform,
            accelerator_id=args.accelerator_id,
            replace=args.replace,
            scope=args.scope,
        )
        print(
            f"added {entry.name}: {entry.size} bytes, sha256 {entry.sha256}, platform {entry.platform}, "
            f"accelerator {entry.accelerator_id} ({catalog.directory / entry.file})"
        )
        return 0
    if not catalog.directory.is_dir():
        raise CatalogError(f"no catalog at {catalog.directory}: no such directory (--bitstream-dir)")
    scan = catalog.scan()
    problems = [{"record": problem.record, "reason": problem.reason} for problem in scan.problems]
    if args.json:
        bitstreams = [asdict(entry) for entry in scan.entries]
        document = {"directory": str(catalog.directory), "bitstreams": bitstreams, "problems": problems}
        print(json.dumps(document, indent=2))
        return 0
    rows: list[dict[str, object]] = [
        {**asdict(entry), "accelerator": entry.accelerator_id, "sha256": entry.sha256[:12]} for entry in scan.entries
    ]
    print(format_table(["name", "scope", "platform", "accelerator", "size", "sha256", "added_at"], rows))
    for problem in problems:
        print(f"skipped {problem['record']}: {problem['reason']}", file=sys.stderr)
    if not scan.entries and not problems:
        print(f"no bitstreams in {catalog.directory}", file=sys.stderr)
    return 0

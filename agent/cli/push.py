"""``fpga-agent catalog push``: push a bitstream file to an OCI registry and print the FpgaBitstream declaring it.

The object (YAML, for ``kubectl apply -f -``) is pinned to the pushed digest. Registry credentials
come from ``--username`` and ``FPGA_AGENT_REGISTRY_PASSWORD`` (or ``--password-stdin``), never from
a flag value that would show in the process list.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import ssl
import sys
from pathlib import Path

import aiohttp
import yaml

from agent.bitstreams.declaration import Credentials, Declaration, declaration_object, validate_secret_name
from agent.bitstreams.http import client_timeout
from agent.bitstreams.publish import push_bitstream
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.errors import BitstreamFileError, FpgaSlotError
from agent.files.bitstream import SCOPES, SLOT_SCOPE, validate_name
from agent.programming.catalogentry import describe_bitstream, normalize_given_id

PASSWORD_ENV = "FPGA_AGENT_REGISTRY_PASSWORD"  # noqa: S105 - the name of the variable, not a password
USERNAME_ENV = "FPGA_AGENT_REGISTRY_USERNAME"


def add_push_command(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    push = actions.add_parser(
        "push",
        help="push a bitstream to an OCI registry and print its FpgaBitstream",
        description="Push FILE to the OCI registry as REF (registry[:port]/repository:tag) and print the "
        "FpgaBitstream object that declares it, pinned to the pushed digest.",
    )
    push.add_argument("file", type=Path, metavar="FILE", help="bitstream file (Intel GBS or raw)")
    push.add_argument("reference", metavar="REF", help="where to push: registry[:port]/repository:tag")
    push.add_argument("--name", required=True, help="name pods ask for: [a-z0-9][a-z0-9._-]*, at most 63 characters")
    push.add_argument(
        "--platform", help="PR interface id the bitstream fits (a GBS file's header gives it; given, it must agree)"
    )
    push.add_argument(
        "--accelerator-id",
        help="id the slot reports once the bitstream is loaded (a GBS file's header gives it; given, it must agree)",
    )
    push.add_argument("--pull-secret", help="Secret (in the agent's namespace) the agents pull with")
    push.add_argument("--prefetch", action="store_true", help="declare it for prefetch to every matching node")
    push.add_argument(
        "--scope",
        choices=SCOPES,
        default=SLOT_SCOPE,
        help="an image for one slot, or for a whole card of the platform (DRA mode) (default: %(default)s)",
    )
    push.add_argument("--plain-http", action="store_true", help="speak plain HTTP to the registry (no TLS)")
    push.add_argument("--ca-file", type=Path, help="CA certificates to trust for the registry's TLS")
    push.add_argument("--username", default=os.environ.get(USERNAME_ENV), help=f"registry user (env {USERNAME_ENV})")
    push.add_argument(
        "--password-stdin", action="store_true", help=f"read the password from standard input (else env {PASSWORD_ENV})"
    )


def run_push(args: argparse.Namespace) -> int:
    """Push and print; one line naming the problem on standard error and 1 when anything fails."""
    try:
        declaration = asyncio.run(_push(args))
    except FpgaSlotError as exc:
        # TLS met a registry that speaks plain HTTP (OpenSSL's WRONG_VERSION_NUMBER): say what to try
        plain = "WRONG_VERSION_NUMBER" in str(exc) and not args.plain_http
        hint = " (the registry answers in plain HTTP, not TLS: give --plain-http)" if plain else ""
        print(f"fpga-agent catalog push: {exc}{hint}", file=sys.stderr)
        return 1
    print(f"pushed {args.file} as {declaration.oci} ({declaration.size} bytes)", file=sys.stderr)
    print(yaml.safe_dump(declaration_object(declaration), sort_keys=False), end="")
    return 0


async def _push(args: argparse.Namespace) -> Declaration:
    reference = parse_reference(args.reference)
    validate_name(args.name)
    if args.pull_secret is not None:
        validate_secret_name(args.pull_secret)
    platform, accelerator_id = await asyncio.to_thread(file_ids, args.file, args.platform, args.accelerator_id)
    credentials = None
    if args.username is not None:
        password = sys.stdin.readline().rstrip("\n") if args.password_stdin else os.environ.get(PASSWORD_ENV, "")
        credentials = Credentials(username=args.username, password=password)
    context = ssl.create_default_context(cafile=str(args.ca_file) if args.ca_file else None)
    plain_http = [reference.registry] if args.plain_http else []
    connector = aiohttp.TCPConnector(ssl=context)
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout()) as session:
        client = RegistryClient(session, plain_http)
        declaration = await push_bitstream(
            client, args.file, args.name, platform, accelerator_id, reference, credentials
        )
    return dataclasses.replace(declaration, pull_secret=args.pull_secret, prefetch=args.prefetch, scope=args.scope)


def file_ids(path: Path, platform: str | None, accelerator_id: str | None) -> tuple[str, str]:
    """The platform and accelerator id to declare for ``path``, as ``catalog add`` would: from a GBS file's header
    (given values must agree), both given for a raw file; CatalogError naming the flag, the file and what differs."""
    given_platform = normalize_given_id(platform, "--platform")
    given_accelerator = normalize_given_id(accelerator_id, "--accelerator-id", accelerator=True)
    try:
        with path.open("rb") as stream:
            description = describe_bitstream(stream, path, given_platform, given_accelerator)
    except OSError as exc:
        raise BitstreamFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return description.platform, description.accelerator_id

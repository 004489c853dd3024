"""``fpga-agent cluster``: the slot map of every node, from the FpgaNodeState objects the agents publish."""

from __future__ import annotations

import argparse
import json
import sys

import agent.cli.flags as cliflags
import agent.cluster.view as clusterview
from agent.kube.client import command_api
from agent.kube.nodes import list_node_states, list_nodes, list_resource_claims
from agent.output.tables import format_table


def add_cluster_command(commands: cliflags.Subparsers) -> None:
    cluster = commands.add_parser(
        "cluster",
        help="slots of every node: platform, loaded bitstream, free/held, health",
        description="Print every node's FPGA slots as its agent published them (its FpgaNodeState). Credentials are "
        "found as kubectl finds them: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster.",
    )
    output = cluster.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print JSON instead of a table")
    output.add_argument("--all", action="store_true", help="also list nodes that publish no slot state")
    output.add_argument(
        "--files",
        action="store_true",
        help="list each node's bitstream files instead (its catalog, added by hand or pulled: no download there)",
    )
    output.add_argument(
        "--claims",
        action="store_true",
        help="list DRA claims instead: what each claim's slots hold (the data the agents write to its status)",
    )
    cliflags.add_option_groups(cluster, cliflags.CLUSTER)


def run_cluster(args: argparse.Namespace) -> int:
    """Print the cluster's slot map; KubeError (one line, exit 1) when the nodes cannot be read."""
    config = cliflags.command_config(args)
    if args.claims:
        with command_api(config.kubeconfig) as api_client:
            claims = list_resource_claims(api_client)
        claim_rows = clusterview.claim_rows(claims)
        if args.json:
            print(json.dumps({"claims": claim_rows}, indent=2))
        elif claim_rows:
            print(format_table(clusterview.CLAIM_COLUMNS, claim_rows))
        else:
            print(f"no claim carries data of {clusterview.DRIVER} ({len(claims)} claims)", file=sys.stderr)
        return 0
    with command_api(config.kubeconfig) as api_client:
        nodes = list_nodes(api_client)
        states = list_node_states(api_client)
    views = clusterview.cluster_views(nodes, states, include_unpublished=args.all)
    if args.json:
        print(json.dumps(clusterview.json_document(views), indent=2))
        return 0
    rows = clusterview.file_rows(views) if args.files else clusterview.table_rows(views)
    if rows:
        notes = ["note"] if any(row.get("note") for row in rows) else []  # a note column only when some row has one
        columns = clusterview.FILE_COLUMNS if args.files else [*clusterview.TABLE_COLUMNS, *notes]
        print(format_table(columns, rows))
    if not views:
        print(f"no node publishes FPGA slot state ({len(nodes)} nodes)", file=sys.stderr)
    elif not args.all and (unpublished := len({node.name for node in nodes} - {view.name for view in views})):
        print(f"nodes without published FPGA slot state: {unpublished} (--all lists them)", file=sys.stderr)
    return 0

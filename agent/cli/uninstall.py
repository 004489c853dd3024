"""``fpga-agent uninstall``: what a plain ``kubectl delete -k`` could not finish (docs/uninstall.md).

Clears the agent's keys from every Node (left by an agent that did not stop cleanly) and releases
the finalizer of the agents' ServiceAccount, with the operator's own credentials.
"""

from __future__ import annotations

import argparse
import sys

import agent.cli.flags as cliflags
from agent.kube.cleanupgrant import ACCOUNT, FINALIZER
from agent.kube.client import command_api
from agent.kube.uninstall import clear_every_node, release_account


def add_uninstall_command(commands: cliflags.Subparsers) -> None:
    uninstall = commands.add_parser(
        "uninstall",
        help="after kubectl delete -k: clear FPGA keys left on Nodes, release the agent's ServiceAccount",
        description="Remove the agent's annotations and labels from every Node that still has them (an agent that "
        f"did not stop cleanly), then the finalizer {FINALIZER} from the ServiceAccount {ACCOUNT}, so that the "
        "namespace can go. Changes nothing when nothing is left. Credentials are found as kubectl finds them: "
        "--kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster.",
    )
    cliflags.add_option_groups(uninstall, cliflags.UNINSTALL)


def run_uninstall(args: argparse.Namespace) -> int:
    """Clear every Node, then release the account; KubeError (one line, exit 1) naming what failed."""
    config = cliflags.command_config(args)
    with command_api(config.kubeconfig) as api_client:
        cleared = clear_every_node(api_client)
        released = release_account(api_client, config.namespace)
    for node, keys in sorted(cleared.items()):
        print(f"node {node}: removed {', '.join(keys)}")
    if not cleared:
        print("no node has FPGA keys")
    where = f"ServiceAccount {config.namespace}/{ACCOUNT}"
    print(f"{where}: finalizer {FINALIZER} removed" if released else f"{where}: no finalizer {FINALIZER} (or gone)")
    sys.stdout.flush()
    return 0

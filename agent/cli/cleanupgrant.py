"""``fpga-agent cleanup-grant``: the grant that lets the agents clean their Nodes through ``kubectl delete -k``.

Run as a Job (``daemonset/cleanup-grant-job.yaml``) so that the agents need no right to create RBAC
objects (:mod:`agent.kube.cleanupgrant`); objects that exist are left as they are.
"""

from __future__ import annotations

import argparse
import sys

import agent.cli.flags as cliflags
from agent.kube.cleanupgrant import ACCOUNT, GRANT_PREFIX, ensure_cleanup_grant
from agent.kube.client import command_api


def add_cleanup_grant_command(commands: cliflags.Subparsers) -> None:
    grant = commands.add_parser(
        "cleanup-grant",
        help="make the RBAC grant the agents clean their Nodes with on kubectl delete -k, unless it exists",
        description=f"Make the ClusterRole and ClusterRoleBinding {GRANT_PREFIX}<namespace UID>, owned by the "
        f"namespace and bound to its ServiceAccount {ACCOUNT}: what the agents need to clear their Nodes and release "
        "the ServiceAccount when the install is deleted. Objects that exist are left as they are. Credentials are "
        "found as kubectl finds them: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster.",
    )
    cliflags.add_option_groups(grant, cliflags.UNINSTALL)


def run_cleanup_grant(args: argparse.Namespace) -> int:
    """Make the grant unless it exists; KubeError (one line, exit 1) naming the failed call."""
    config = cliflags.command_config(args)
    with command_api(config.kubeconfig) as api_client:
        made = ensure_cleanup_grant(api_client, config.namespace)
    what = f"cleanup grant of namespace {config.namespace} for ServiceAccount {ACCOUNT}"
    print(f"{what}: made" if made else f"{what}: already there")
    sys.stdout.flush()
    return 0

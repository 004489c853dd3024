"""``fpga-agent uninstall`` as an operator runs it after ``kubectl delete -k`` left something: a real process that
clears the agent's keys from every Node and releases the agent's ServiceAccount, against the fake API server."""

from __future__ import annotations

from pathlib import Path

from agent.kube.cleanupgrant import ACCOUNT, FINALIZER
from agent.kube.nodefields import PLATFORM_LABEL, PLATFORM_LABEL_PREFIX
from tests.fakeapi import running_apiserver
from tests.integration.test_cluster_cli import fpga_agent, operator_env

#: Slot state annotations an earlier version kept on its Node (the uninstall still removes them).
SLOTS_ANNOTATION = "example.com/fpga-slots"
HEARTBEAT_ANNOTATION = "example.com/fpga-agent-heartbeat"

NAMESPACE = "fpga-slot"
SIM = "sim-pr-v1"
FORBIDDEN = 'nodes is forbidden: User "dev" cannot list resource "nodes"'


def test_uninstall_clears_the_nodes_left_with_keys_and_releases_the_account(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.add_node(
            "node-a",
            annotations={SLOTS_ANNOTATION: "[]", HEARTBEAT_ANNOTATION: "1", "owner": "ops"},
            labels={PLATFORM_LABEL: SIM, PLATFORM_LABEL_PREFIX + SIM: "true", "team": "fpga"},
        )
        api.add_node("node-b", labels={"team": "fpga"})
        api.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER], deleting=True)
        env = operator_env(tmp_path, KUBECONFIG=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        done = fpga_agent(tmp_path, "uninstall", env=env)
        assert done.returncode == 0, done.stderr
        keys = ", ".join(sorted([SLOTS_ANNOTATION, HEARTBEAT_ANNOTATION, PLATFORM_LABEL, PLATFORM_LABEL_PREFIX + SIM]))
        assert done.stdout.splitlines() == [
            f"node node-a: removed {keys}",
            f"ServiceAccount {NAMESPACE}/{ACCOUNT}: finalizer {FINALIZER} removed",
        ]
        node = api.node("node-a")
        assert node is not None
        assert node["metadata"]["annotations"]["owner"] == "ops"
        assert not set(node["metadata"]["annotations"]) & {SLOTS_ANNOTATION, HEARTBEAT_ANNOTATION}
        assert node["metadata"]["labels"]["team"] == "fpga"
        assert not [k for k in node["metadata"]["labels"] if k == PLATFORM_LABEL or k.startswith(PLATFORM_LABEL_PREFIX)]
        assert api.service_account(NAMESPACE, ACCOUNT) is None  # its deletion went through
        patches = len(api.requests("PATCH"))
        # Again: nothing left, nothing changed.
        again = fpga_agent(tmp_path, "uninstall", env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines() == [
            "no node has FPGA keys",
            f"ServiceAccount {NAMESPACE}/{ACCOUNT}: no finalizer {FINALIZER} (or gone)",
        ]
        assert len(api.requests("PATCH")) == patches


def test_uninstall_without_permission_says_which_call_failed_and_changes_nothing(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.add_node("node-a", annotations={SLOTS_ANNOTATION: "[]"})
        api.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER], deleting=True)
        api.fail_next("GET", "/api/v1/nodes", 403, message=FORBIDDEN)
        env = operator_env(tmp_path, KUBECONFIG=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        done = fpga_agent(tmp_path, "uninstall", env=env)
        assert done.returncode == 1
        assert done.stdout == ""
        errors = [line for line in done.stderr.splitlines() if line.startswith("fpga-agent uninstall: ")]
        assert errors == ["fpga-agent uninstall: cannot list nodes: HTTP 403 Forbidden: " + FORBIDDEN]
        node = api.node("node-a")
        assert node is not None
        assert SLOTS_ANNOTATION in node["metadata"]["annotations"]
        account = api.service_account(NAMESPACE, ACCOUNT)
        assert account is not None
        assert account["metadata"]["finalizers"] == [FINALIZER]

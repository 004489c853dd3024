"""Uninstalling fpga-slot leaves no FPGA node behind, in either mode: when its DaemonSet is deleted, the agent
removes its slot state, heartbeat and platform labels from the Node on its clean stop (during an update it
leaves them for the next agent pod).

The DaemonSet goes first, with foreground deletion, as docs/dra.md says to uninstall: ``kubectl delete -k``
alone also deletes the agent's ServiceAccount and RBAC at once, before the agents are stopped, so that they
can no longer write to their Nodes (the extender then ignores their state once the heartbeat is old).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.e2e.cluster import REPO, Cluster, wait_for
from tests.e2e.deployment import AGENT, NAMESPACE, deploy_as_configured

PREFIXES = ("example.com/fpga-slots", "example.com/fpga-bitstreams", "example.com/fpga-agent", "example.com/fpga-pl")
LABEL_PREFIX = "fpga-platform.example.com/"


def fpga_keys(cluster: Cluster, node: str) -> list[str]:
    """The Node's annotations and labels that the agent publishes."""
    meta = cluster.core.read_node(node).metadata
    keys = [*(meta.annotations or {}), *(meta.labels or {})]
    return sorted(k for k in keys if k.startswith(PREFIXES) or k.startswith(LABEL_PREFIX))


def follow_log(cluster: Cluster, pod: str, lines: list[str]) -> threading.Thread:
    """Collect the agent's log to its end (the pod's log goes with the pod)."""

    def read() -> None:
        try:
            stream = cluster.core.read_namespaced_pod_log(pod, NAMESPACE, follow=True, _preload_content=False)
            for raw in stream.stream():
                lines.extend(raw.decode(errors="replace").splitlines())
        except Exception as exc:  # the pod went: what was read is kept
            lines.append(f"(log ended: {type(exc).__name__})")

    thread = threading.Thread(target=read, name=f"log-{pod}", daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("components", [(), (REPO / "daemonset" / "dra-mode",)], ids=["device-plugin", "dra"])
def test_deleting_the_daemonset_removes_the_agents_labels_and_annotations_from_the_node(
    cluster: Cluster, pytestconfig: pytest.Config, components: tuple[Path, ...]
) -> None:
    with deploy_as_configured(cluster, pytestconfig, components) as deployed:
        node = deployed.suite.node
        published = wait_for("the slot state on the node", lambda: fpga_keys(cluster, node))
        assert "example.com/fpga-slots" in published
        assert "example.com/fpga-agent-heartbeat" in published
        assert any(k.startswith(LABEL_PREFIX) for k in published)
        agent = deployed.agent_pod().metadata.name
        log: list[str] = []
        reader = follow_log(cluster, agent, log)
        cluster.apps.delete_namespaced_daemon_set(AGENT, NAMESPACE, propagation_policy="Foreground")
        cluster.wait_pod_gone(NAMESPACE, agent)
        reader.join(timeout=10)
        tail = "\n".join(log[-15:])
        assert any("removing its slot state" in line for line in log), tail
        wait_for("no FPGA labels or annotations on the node", lambda: fpga_keys(cluster, node) == [])

"""Uninstalling fpga-slot (``kubectl delete -k``, as the deployment fixture's teardown does) leaves no FPGA node
behind, in either mode: the agent removes its slot state, heartbeat and platform labels from the Node on its
clean stop, because its DaemonSet is gone (during an update it leaves them for the next agent pod)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cluster import REPO, Cluster, wait_for
from tests.e2e.deployment import deploy_as_configured

PREFIXES = ("example.com/fpga-slots", "example.com/fpga-bitstreams", "example.com/fpga-agent", "example.com/fpga-pl")
LABEL_PREFIX = "fpga-platform.example.com/"


def fpga_keys(cluster: Cluster, node: str) -> list[str]:
    """The Node's annotations and labels that the agent publishes."""
    meta = cluster.core.read_node(node).metadata
    keys = [*(meta.annotations or {}), *(meta.labels or {})]
    return sorted(k for k in keys if k.startswith(PREFIXES) or k.startswith(LABEL_PREFIX))


@pytest.mark.parametrize("components", [(), (REPO / "daemonset" / "dra-mode",)], ids=["device-plugin", "dra"])
def test_uninstalling_removes_the_agents_labels_and_annotations_from_the_node(
    cluster: Cluster, pytestconfig: pytest.Config, components: tuple[Path, ...]
) -> None:
    with deploy_as_configured(cluster, pytestconfig, components) as deployed:
        node = deployed.suite.node
        published = wait_for("the slot state on the node", lambda: fpga_keys(cluster, node))
        assert "example.com/fpga-slots" in published
        assert "example.com/fpga-agent-heartbeat" in published
        assert any(k.startswith(LABEL_PREFIX) for k in published)
    # The fixture ran kubectl delete -k and waited for the objects to go.
    wait_for("no FPGA labels or annotations on the node", lambda: fpga_keys(cluster, node) == [])

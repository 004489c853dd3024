"""A first try, as a new user makes it: ``kubectl apply -k`` of the sim overlay, then
``daemonset/examples/pod.yaml`` as it is, with no step between: the simulated node's catalog holds the sample
bitstream aes-v1 from the start, so the fpga-scheduler places the pod and its slot is programmed with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.simfpga.sample import SAMPLE_NAME
from tests.e2e.cluster import REPO, Cluster, running
from tests.e2e.deployment import STATE_DIR, Deployment, deploy, kubectl

EXAMPLE = REPO / "daemonset" / "examples" / "pod.yaml"
#: The node's catalog on the host (the agent DaemonSet's hostPath), under the host's / at /host.
CATALOG_ON_HOST = f"/host{STATE_DIR}/bitstreams"


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    """The overlay under test on the node, whose catalog has no aes-v1 before the agent starts (an earlier run
    or an operator may have left one there): what the agent finds is what it put there itself."""
    with deploy(
        cluster,
        image=pytestconfig.getoption("--e2e-image"),
        node=pytestconfig.getoption("--e2e-node"),
        overlay=Path(pytestconfig.getoption("--e2e-overlay")),
        kubelet_restart=pytestconfig.getoption("--e2e-kubelet-restart"),
        host_setup=f"rm -f {CATALOG_ON_HOST}/{SAMPLE_NAME}.*",
    ) as deployed:
        yield deployed


def test_the_example_pod_runs_on_the_sim_overlay_with_no_other_step(deployment: Deployment) -> None:
    suite = deployment.suite
    example = yaml.safe_load(EXAMPLE.read_text())
    name = example["metadata"]["name"]
    assert example["metadata"]["annotations"]["example.com/fpga-bitstream"] == SAMPLE_NAME
    kubectl("apply", "-n", suite.namespace, "-f", str(EXAMPLE))
    try:
        pod = suite.cluster.wait_pod(suite.namespace, name, running, "Running")
        assert pod.spec.node_name == suite.node
        event = suite.cluster.wait_event(suite.namespace, name, {"FpgaSlotProgrammed", "FpgaBitstreamRejected"})
        assert event.reason == "FpgaSlotProgrammed", event.message
        assert f"with {SAMPLE_NAME} in" in event.message
        slot = suite.slots_of_pod(name)
        assert slot.startswith("simcard0-slot"), slot
        scheduled = suite.cluster.wait_event(suite.namespace, name, {"Scheduled"})
        assert "fpga-scheduler" in (scheduled.reporting_component or "", scheduled.source.component or ""), scheduled
    finally:
        suite.delete_pod(name)

"""A static slot programmed by a vendor tool on a real node: daemonset/ with the command-programmer example.

The example Component (daemonset/examples/command-programmer) runs the agent with the static
backend and mounts the XRT-like stand-in ``xbutil`` from a ConfigMap; the slot's device node is
a stand-in made on the node for the test. The first pod's slot is programmed by the tool (it
logs every call in the stand-in card's directory), the second pod's start is a cache hit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.deviceplugin.constants import RESOURCE_NAME
from tests.e2e.cluster import REPO, Cluster, node_is_ready, slots_of
from tests.e2e.deployment import NAMESPACE, STATE_DIR, Deployment, deploy, kubectl

COMPONENT = REPO / "daemonset" / "examples" / "command-programmer"
PLATFORM = "xilinx_u250_gen3x16_xdma_shell_4_1"
BITSTREAM = "e2e-vadd"
ACCEL = "5eed0000-e2e0-4c0d-8000-00000000cafe"
CARD_DIR = f"{STATE_DIR}/example-card"
SLOT = "alveo-e5-user"
SHOW_SLOT = 'echo "FPGA_SLOTS=$FPGA_SLOTS"; ls -l "$FPGA_SLOT_0_DEVICE"; sleep 3600'
# The slot's device node (a stand-in: the zero device's numbers) and the stand-in card's state.
HOST_SETUP = (
    'rm -rf "/host/dev/fpga-cmd0" "/host/var/lib/fpga-agent/example-card"; '
    'if [ "$1" = setup ]; then mknod /host/dev/fpga-cmd0 c 1 5; fi'
)


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    with deploy(
        cluster,
        image=pytestconfig.getoption("--e2e-image"),
        node=pytestconfig.getoption("--e2e-node"),
        overlay=Path(pytestconfig.getoption("--e2e-overlay")),
        kubelet_restart=pytestconfig.getoption("--e2e-kubelet-restart"),
        components=(COMPONENT,),
        host_setup=HOST_SETUP,
    ) as deployed:
        yield deployed


def in_agent(deployment: Deployment, script: str) -> str:
    return kubectl("exec", "-n", NAMESPACE, deployment.suite.agent_pod, "-c", "agent", "--", "sh", "-c", script)


def tool_calls(deployment: Deployment) -> list[str]:
    return in_agent(deployment, f"cat {CARD_DIR}/calls 2>/dev/null || true").splitlines()


def test_command_programmer_programs_a_static_slot_on_the_node_then_a_cache_hit(deployment: Deployment) -> None:
    suite = deployment.suite
    suite.cluster.wait_node(
        suite.node,
        lambda n: node_is_ready(n) and slots_of(n, "allocatable") == "1",
        f"Ready with the static slot as 1 {RESOURCE_NAME} allocatable",
    )
    in_agent(
        deployment,
        f"printf 'xclbin2 uuid={ACCEL}\\n' > /tmp/vadd.xclbin && head -c 4096 /dev/urandom >> /tmp/vadd.xclbin && "
        f"fpga-agent catalog add /tmp/vadd.xclbin --name {BITSTREAM} --platform {PLATFORM} "
        f"--accelerator-id {ACCEL} --replace && rm /tmp/vadd.xclbin",
    )
    # At start the read-back found the slot empty.
    assert tool_calls(deployment) == ["xbutil examine --device 0000:e5:00.1 --report dynamic-regions"]

    suite.running_pod("vadd-1", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    assert suite.slots_of_pod("vadd-1") == SLOT
    event = suite.cluster.wait_event(suite.namespace, "vadd-1", {"FpgaSlotProgrammed", "FpgaSlotProgrammingFailed"})
    assert event.reason == "FpgaSlotProgrammed", event.message
    calls = tool_calls(deployment)
    program, read_back = calls[1:]
    assert program.startswith(f"xbutil program --device 0000:e5:00.1 --user {STATE_DIR}/bitstreams/{BITSTREAM}.")
    assert read_back == calls[0]
    suite.delete_pod("vadd-1")

    suite.running_pod("vadd-2", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    event = suite.cluster.wait_event(suite.namespace, "vadd-2", {"FpgaSlotProgrammed", "FpgaSlotCacheHit"})
    assert event.reason == "FpgaSlotCacheHit", event.message
    assert tool_calls(deployment) == calls  # the hit ran no tool
    suite.delete_pod("vadd-2")

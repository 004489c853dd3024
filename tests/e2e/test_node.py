"""fpga-slot on a real node: registration, a programmed slot, a cache hit, limits, errors, a kubelet restart.

The tests run in this order and share the agent (one simulated card with one slot);
each removes its pods before the next starts, so the slot is free again.
"""

from __future__ import annotations

import re

from agent.deviceplugin.constants import RESOURCE_NAME
from agent.discovery.sim import CONTAINER_DEV_DIR
from tests.e2e.cluster import BITSTREAM, SLOT, Suite, is_ready, node_is_ready, running, slots_of

SHOW_SLOT = 'echo "FPGA_SLOTS=$FPGA_SLOTS"; echo "DEVICE=$FPGA_SLOT_0_DEVICE"; ls -l "$FPGA_SLOT_0_DEVICE"; sleep 3600'


def test_registration_shows_the_slots_in_the_node_capacity(suite: Suite) -> None:
    node = suite.cluster.wait_node(
        suite.node,
        lambda n: slots_of(n, "capacity") == "1" and slots_of(n, "allocatable") == "1",
        f"with 1 {RESOURCE_NAME} in capacity and allocatable",
    )
    assert node_is_ready(node)
    assert suite.registrations() >= 1


def test_a_pod_with_a_bitstream_starts_with_its_slot_programmed(suite: Suite) -> None:
    suite.pod("programmed", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    try:
        suite.cluster.wait_pod(suite.namespace, "programmed", running, "Running")
        log = suite.cluster.logs(suite.namespace, "programmed")
        assert f"FPGA_SLOTS={SLOT}" in log
        assert f"DEVICE={CONTAINER_DEV_DIR}/{SLOT}" in log
        assert re.search(rf"^c\S* .* {re.escape(CONTAINER_DEV_DIR)}/{SLOT}$", log, re.MULTILINE), log  # a char device
        event = suite.cluster.wait_event(suite.namespace, "programmed", {"FpgaSlotProgrammed"})
        assert f"Programmed slot {SLOT} with {BITSTREAM}" in event.message
    finally:
        suite.delete_pod("programmed")


def test_a_second_pod_gets_the_loaded_slot_without_programming(suite: Suite) -> None:
    suite.pod("cache-hit", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    try:
        suite.cluster.wait_pod(suite.namespace, "cache-hit", running, "Running")
        event = suite.cluster.wait_event(suite.namespace, "cache-hit", {"FpgaSlotCacheHit", "FpgaSlotProgrammed"})
        assert event.reason == "FpgaSlotCacheHit", event.message
        assert f"Slot {SLOT} already held {BITSTREAM}" in event.message
    finally:
        suite.delete_pod("cache-hit")


def test_a_pod_asking_for_more_slots_than_exist_stays_pending(suite: Suite) -> None:
    suite.pod("too-many", slots=2)
    try:
        pod = suite.cluster.wait_pod(
            suite.namespace,
            "too-many",
            lambda p: any(
                c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                for c in p.status.conditions or []
            ),
            "found unschedulable by the scheduler",
        )
        assert pod.status.phase == "Pending"
        (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
        assert f"Insufficient {RESOURCE_NAME}" in condition.message
    finally:
        suite.delete_pod("too-many")


def test_an_unknown_bitstream_fails_with_a_clear_event(suite: Suite) -> None:
    suite.pod("unknown-bitstream", slots=1, bitstream="no-such-bitstream")
    try:
        event = suite.cluster.wait_event(suite.namespace, "unknown-bitstream", {"FpgaBitstreamRejected"})
        assert event.type == "Warning"
        assert "no-such-bitstream" in event.message
        pod = suite.cluster.core.read_namespaced_pod("unknown-bitstream", suite.namespace)
        assert not running(pod)
    finally:
        suite.delete_pod("unknown-bitstream")


def test_a_kubelet_restart_leaves_the_capacity_and_the_agent_registers_again(suite: Suite) -> None:
    before = suite.registrations()
    suite.restart_kubelet()
    suite.wait_registrations(before + 1)  # the kubelet deleted the agent's socket; it served and registered again
    suite.cluster.wait_pod(suite.namespace, suite.agent_pod, is_ready, "Ready again after the kubelet restart")
    node = suite.cluster.wait_node(
        suite.node,
        lambda n: node_is_ready(n) and slots_of(n, "allocatable") == "1",
        f"Ready with 1 {RESOURCE_NAME} allocatable after the kubelet restart",
    )
    assert slots_of(node, "capacity") == "1"
    # And it still serves: the loaded slot is handed out again without programming.
    suite.pod("after-restart", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    try:
        suite.cluster.wait_pod(suite.namespace, "after-restart", running, "Running")
        event = suite.cluster.wait_event(suite.namespace, "after-restart", {"FpgaSlotCacheHit", "FpgaSlotProgrammed"})
        assert event.reason == "FpgaSlotCacheHit", event.message
    finally:
        suite.delete_pod("after-restart")

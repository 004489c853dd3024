"""fpga-slot deployed from daemonset/ on a real node: the DaemonSet, its probes, the extender answering the
fpga-scheduler's certificate only, the fpga-scheduler with the extender placing a pod, a rolling update, a
SIGKILLed agent and a kubelet restart under running pods.

The tests run in this order and share the deployment (one simulated card with two slots on the node);
each removes its pods before the next starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from agent.cli.certs import CLIENT_SECRET, SERVER_SECRET
from agent.deviceplugin.constants import RESOURCE_NAME
from tests.e2e.cluster import (
    BITSTREAM,
    Cluster,
    NodeWrites,
    Suite,
    is_ready,
    node_is_ready,
    restarts,
    running,
    slots_of,
    wait_for,
)
from tests.e2e.deployment import (
    EXTENDER,
    NAMESPACE,
    SCHEDULER,
    SLOTS,
    Deployment,
    deploy_as_configured,
    probe_body,
)
from tests.e2e.schedulerclient import SchedulerClient

SHOW_SLOT = 'echo "FPGA_SLOTS=$FPGA_SLOTS"; ls -l "$FPGA_SLOT_0_DEVICE"; sleep 3600'
#: FPGA pods started and stopped one after another while the Node's writes are counted.
NODE_WRITE_PODS = 10
#: A container that holds its slot and stops at once when asked (no 30 s grace period per pod).
HOLD_SLOT = 'trap "exit 0" TERM; while true; do sleep 1; done'


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    with deploy_as_configured(cluster, pytestconfig) as deployed:
        yield deployed


@pytest.fixture
def pods(deployment: Deployment) -> Iterator[Suite]:
    """The deployment's test pods; every pod a test starts is deleted after it."""
    suite = deployment.suite
    existing = {p.metadata.name for p in suite.cluster.core.list_namespaced_pod(suite.namespace).items}
    yield suite
    for pod in suite.cluster.core.list_namespaced_pod(suite.namespace).items:
        if pod.metadata.name not in existing:
            suite.delete_pod(pod.metadata.name)


def wait_all_slots_allocatable(suite: Suite) -> None:
    suite.cluster.wait_node(
        suite.node,
        lambda n: node_is_ready(n) and slots_of(n, "allocatable") == str(SLOTS),
        f"Ready with {SLOTS} {RESOURCE_NAME} allocatable",
    )


def assert_untouched(suite: Suite, holders: dict[str, str]) -> None:
    """Every pod in ``holders`` still runs, never restarted, on the slot it had."""
    for name, slot in holders.items():
        pod = suite.cluster.core.read_namespaced_pod(name, suite.namespace)
        assert running(pod), pod.status
        assert restarts(pod) == 0, pod.status
        assert suite.slots_of_pod(name) == slot


def test_the_daemonset_is_ready_and_the_node_shows_its_slots(deployment: Deployment) -> None:
    suite = deployment.suite
    wait_all_slots_allocatable(suite)
    published = wait_for(
        "the node's slots published as its FpgaNodeState", lambda: suite.cluster.node_state(NAMESPACE, suite.node)
    )
    assert len(published) == SLOTS
    assert all(slot["healthy"] and slot["free"] for slot in published), published
    node = suite.cluster.core.read_node(suite.node)
    assert node.metadata.labels.get("example.com/fpga-platform") == "sim-pr-v1"
    assert not [key for key in node.metadata.annotations or {} if key.startswith("example.com/fpga")]
    agent = deployment.agent_pod()
    assert is_ready(agent)  # the readiness probe (/readyz: registered) passes, so does liveness
    assert restarts(agent) == 0
    assert suite.registrations() >= 1


def test_fpga_pods_starting_and_stopping_write_nothing_on_the_node(deployment: Deployment, pods: Suite) -> None:
    """The slot state follows each pod in the FpgaNodeState; the Node's labels and annotations stay as they are."""
    watched = NodeWrites(pods.cluster, pods.node)
    with watched:
        for index in range(NODE_WRITE_PODS):
            name = f"node-writes-{index}"
            pods.running_pod(name, slots=1, bitstream=BITSTREAM, command=HOLD_SLOT)
            wait_for("the slot held in the FpgaNodeState", lambda: held(pods) == 1)
            pods.delete_pod(name)
            wait_for("the slot free in the FpgaNodeState", lambda: held(pods) == 0)
    writes = watched.metadata_changes()
    print(f"node metadata writes: {len(writes)} for {NODE_WRITE_PODS} FPGA pods started and stopped")
    assert len(writes) / NODE_WRITE_PODS <= 0.1, writes


def held(suite: Suite) -> int | None:
    published = suite.cluster.node_state(NAMESPACE, suite.node)
    return None if published is None else sum(1 for slot in published if not slot["free"])


def test_the_shipped_extender_answers_only_the_schedulers_certificate(deployment: Deployment) -> None:
    """As shipped (no TLS step of the user's own): the certificates' Job made the two Secrets, the extender
    serves HTTPS with client certificates and is Ready (its probes work with TLS on), and of four clients
    calling it from where the scheduler runs, only the one with the scheduler's certificate is answered."""
    deployment.wait_available(EXTENDER)
    core = deployment.cluster.core
    for name in (SERVER_SECRET, CLIENT_SECRET):
        secret = core.read_namespaced_secret(name, NAMESPACE)
        assert secret.type == "kubernetes.io/tls"
        assert set(secret.data) == {"tls.crt", "tls.key", "ca.crt"}
    client = SchedulerClient(deployment.cluster, deployment.suite.image)
    outcomes = client.outcomes(probe_body(BITSTREAM, [deployment.suite.node]))
    assert outcomes["scheduler"] == "200", outcomes
    for refused in ("no-certificate", "other-ca", "plain-http"):
        assert outcomes[refused].startswith("refused: "), outcomes
    (extender,) = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/component=extender").items
    assert is_ready(extender)
    assert restarts(extender) == 0


def test_the_fpga_scheduler_with_the_extender_places_a_pod_where_its_bitstream_is(
    deployment: Deployment, pods: Suite
) -> None:
    deployment.wait_available(SCHEDULER)
    deployment.wait_available(EXTENDER)
    with ExitStack() as stack:
        # Two more feasible nodes, each with one free slot: the plain profile would prefer them
        # (MostAllocated packing); only the extender's score sends the pod to the node with the agent.
        fakes = stack.enter_context(deployment.fake_nodes(2))
        # The first pod programs its slot, or finds it loaded by an earlier test; the second finds it loaded.
        first = {"FpgaSlotProgrammed", "FpgaSlotCacheHit"}
        for name, reasons in (("placed", first), ("placed-again", {"FpgaSlotCacheHit"})):
            deployment.wait_extender_prefers(pods.node, fakes, BITSTREAM)
            calls = deployment.extender_calls("prioritize")
            pods.pod(name, slots=1, bitstream=BITSTREAM, command=SHOW_SLOT, scheduler=SCHEDULER)
            pod = pods.cluster.wait_pod(pods.namespace, name, lambda p: bool(p.spec.node_name), "scheduled")
            assert pod.spec.node_name == pods.node, f"{name} went to {pod.spec.node_name}"
            pods.cluster.wait_pod(pods.namespace, name, running, "Running")
            event = pods.cluster.wait_event(pods.namespace, name, {"FpgaSlotProgrammed", "FpgaSlotCacheHit"})
            assert event.reason in reasons, event.message
            scheduled = pods.cluster.wait_event(pods.namespace, name, {"Scheduled"})
            assert SCHEDULER in (scheduled.reporting_component or "", scheduled.source.component or ""), scheduled
            assert deployment.extender_calls("prioritize") > calls
            pods.delete_pod(name)


def test_a_rolling_update_keeps_running_pods_on_their_slots(deployment: Deployment, pods: Suite) -> None:
    pods.running_pod("before-update", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    holders = {"before-update": pods.slots_of_pod("before-update")}
    old_agent = deployment.agent_pod().metadata.name
    pods.cluster.apps.patch_namespaced_daemon_set(
        "fpga-slot-agent",
        NAMESPACE,
        {"spec": {"template": {"metadata": {"annotations": {"fpga-slot-e2e/rollout": pods.namespace}}}}},
    )
    new_agent = deployment.wait_rolled_out()
    assert new_agent.metadata.name != old_agent
    wait_all_slots_allocatable(pods)
    assert_untouched(pods, holders)
    # The free slot is handed out once, and no more than the node has.
    pods.running_pod("after-update", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    holders["after-update"] = pods.slots_of_pod("after-update")
    assert holders["after-update"] != holders["before-update"]
    assert_no_slot_left(pods)


def assert_no_slot_left(suite: Suite) -> None:
    suite.pod("one-too-many", slots=1)
    pod = suite.cluster.wait_pod(
        suite.namespace,
        "one-too-many",
        lambda p: any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or []),
        "left unschedulable",
    )
    (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert f"Insufficient {RESOURCE_NAME}" in condition.message
    suite.delete_pod("one-too-many")


def test_a_sigkilled_agent_comes_back_and_hands_out_no_slot_twice(deployment: Deployment, pods: Suite) -> None:
    holders = {}
    for name in ("kill-a", "kill-b"):
        pods.running_pod(name, slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
        holders[name] = pods.slots_of_pod(name)
    agent = deployment.agent_pod()
    before = restarts(agent)
    # SIGKILL from the host (its PIDs, no nsenter): no SIGTERM, no final checkpoint, the socket left behind.
    # The bracket keeps the pattern from matching this script's own command line.
    pods.run_on_host(
        "kill-agent",
        "found=0; for p in /proc/[0-9]*; do "
        "if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'fpga-agen[t] run'; then kill -9 ${p#/proc/}; found=1; fi; "
        "done; test $found = 1",
        host_pid=True,
    )
    pods.cluster.wait_pod(
        NAMESPACE, agent.metadata.name, lambda p: restarts(p) > before and is_ready(p), "restarted and Ready"
    )
    wait_all_slots_allocatable(pods)
    assert_untouched(pods, holders)
    assert_no_slot_left(pods)
    # A freed slot goes to the next pod, the other stays with its holder.
    pods.delete_pod("kill-a")
    pods.running_pod("kill-c", slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
    assert pods.slots_of_pod("kill-c") == holders["kill-a"]


def test_a_kubelet_restart_keeps_running_pods_and_the_agent_registers_again(
    deployment: Deployment, pods: Suite
) -> None:
    holders = {}
    for name in ("restart-a", "restart-b"):
        pods.running_pod(name, slots=1, bitstream=BITSTREAM, command=SHOW_SLOT)
        holders[name] = pods.slots_of_pod(name)
    agent_restarts = restarts(deployment.wait_rolled_out())
    before = pods.registrations()
    pods.restart_kubelet()
    pods.wait_registrations(before + 1)  # the kubelet deleted the agent's socket; it served and registered again
    wait_all_slots_allocatable(pods)
    assert restarts(deployment.wait_rolled_out()) == agent_restarts  # the agent itself kept running
    assert_untouched(pods, holders)
    assert_no_slot_left(pods)

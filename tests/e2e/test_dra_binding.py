"""Program before bind on the real cluster (DRA mode, FPGA_AGENT_BINDING_CONDITIONS=true): the real scheduler
waits in PreBind for the agent's binding condition; a programming that fails on the first slot places the pod
again on another slot; claims carry what their slot holds with binding conditions on and off; and a slot's
health follows into the running pod's status (allocatedResourcesStatus) and the slice's device taint.

Faults come from the simulated cards' fault files on the host (agent/simfpga/faultfiles.py), written through
the agent pod, whose state directory is the host's.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.dra.binding import BOUND_CONDITION, FAILED_CONDITION, FAILED_TAINT
from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import UNHEALTHY_TAINT
from tests.e2e.cluster import BITSTREAM, Cluster, running, wait_for
from tests.e2e.deployment import (
    EXTENDER,
    NAMESPACE,
    SCHEDULER,
    STATE_DIR,
    Deployment,
    deploy_as_configured,
    dra_components,
    kubectl,
)
from tests.e2e.test_dra_agent import allocation_of, apply_template, claim_pod, slot_is_free

FAULTS = f"{STATE_DIR}/sim-dev/faults"
#: The sample bitstream the sim overlays put in every simulated node's catalog (--sim-sample-bitstream).
SAMPLE = "aes-v1"


def set_binding_conditions(deployment: Deployment, on: bool) -> None:
    """The DaemonSet option, as an operator sets it; the rolled-out agent republishes its slice."""
    kubectl(
        "set", "env", "-n", NAMESPACE, "daemonset/fpga-slot-agent", "-c", "agent",
        f"FPGA_AGENT_BINDING_CONDITIONS={'true' if on else 'false'}",
    )  # fmt: skip
    deployment.wait_rolled_out()
    node = deployment.suite.node
    wait_for(
        f"the slice with binding conditions {'on' if on else 'off'}",
        lambda: all(bool(d.get("bindingConditions")) is on for d in raw_slice(node)["spec"]["devices"]),
    )


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    with deploy_as_configured(cluster, pytestconfig, dra_components(pytestconfig)) as deployed:
        deployed.wait_available(SCHEDULER)
        deployed.wait_available(EXTENDER)
        deployed.add_to_catalog()
        # Not under test here (tests/e2e/test_dra_agent.py tests it): the bitstream webhook, which refuses a
        # template until the extender has read the node's new catalog.
        kubectl("delete", "validatingwebhookconfiguration", "fpga-slot-bitstreams", "--ignore-not-found")
        suite = deployed.suite
        refusals: list[str] = []
        wait_for(
            "the cache-aware template accepted",
            lambda: accepted(apply_template(suite, BITSTREAM), refusals),
        )
        set_binding_conditions(deployed, True)
        yield deployed


def accepted(done: subprocess.CompletedProcess[str], refusals: list[str]) -> bool:
    """Whether ``kubectl apply`` of the template worked (the bitstream webhook may refuse it until the extender
    has seen the new catalog); the last refusal is kept for the failure message."""
    if done.returncode != 0:
        refusals[:] = [done.stderr[-500:]]
        print("template refused:", done.stderr[-500:])
    return done.returncode == 0


def raw(kind: str, name: str, namespace: str = "") -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json", *(["-n", namespace] if namespace else [])]
    got: dict[str, Any] = json.loads(kubectl(*args))
    return got


def raw_slice(node: str) -> dict[str, Any]:
    return raw("resourceslice", f"{node}-{DRIVER_NAME}")


def taints(node: str) -> dict[str, set[str]]:
    return {d["name"]: {t["key"] for t in d.get("taints") or []} for d in raw_slice(node)["spec"]["devices"]}


def claim_of(deployment: Deployment, pod: str) -> dict[str, Any]:
    suite = deployment.suite
    (status,) = raw("pod", pod, suite.namespace)["status"]["resourceClaimStatuses"]
    return raw("resourceclaim", status["resourceClaimName"], suite.namespace)


def our_entry(claim: dict[str, Any], device: str) -> dict[str, Any]:
    (entry,) = [e for e in claim["status"].get("devices") or [] if e["driver"] == DRIVER_NAME and e["device"] == device]
    return dict(entry)


def write_fault(deployment: Deployment, slot: str, kind: str, reason: str) -> None:
    command = f"mkdir -p {FAULTS} && printf %s '{reason}' > {FAULTS}/{slot}.{kind}"
    kubectl("exec", "-n", NAMESPACE, deployment.suite.agent_pod, "-c", "agent", "--", "sh", "-c", command)


def remove_fault(deployment: Deployment, slot: str, kind: str) -> None:
    command = f"rm -f {FAULTS}/{slot}.{kind}"
    kubectl("exec", "-n", NAMESPACE, deployment.suite.agent_pod, "-c", "agent", "--", "sh", "-c", command)


def scheduled_at(pod: dict[str, Any]) -> str:
    (scheduled,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["status"] == "True"
    return str(scheduled["lastTransitionTime"])


def test_a_failed_programming_places_the_pod_again_on_another_slot_and_taints_the_failed_one(
    deployment: Deployment,
) -> None:
    """Runs first: every slot is empty, so the allocator takes the first slot of the slice for `any`."""
    suite = deployment.suite
    first = raw_slice(suite.node)["spec"]["devices"][0]["name"]
    write_fault(deployment, first, "fail-next", "e2e: bitstream rejected by the slot")
    time.sleep(2.5)  # the agent looks at the fault files every second
    claim_pod(suite, "retried", BITSTREAM)
    suite.cluster.wait_pod(suite.namespace, "retried", running, "Running")
    _request, device = allocation_of(_resource(deployment), suite, "retried")
    assert device != first
    reasons = suite.cluster.reasons(suite.namespace, "retried")
    assert "FpgaProgrammingFailed" in reasons, reasons
    assert FAILED_TAINT in taints(suite.node)[first]
    assert slot_is_free(suite, first) is True  # the failed claim holds no slot
    entry = our_entry(claim_of(deployment, "retried"), device)
    assert {(c["type"], c["status"]) for c in entry["conditions"]} == {(BOUND_CONDITION, "True")}
    assert not [c for c in entry["conditions"] if c["type"] == FAILED_CONDITION]
    suite.delete_pod("retried")


def test_the_pod_binds_only_after_its_slot_is_programmed_and_the_claim_says_what_it_holds(
    deployment: Deployment,
) -> None:
    suite = deployment.suite
    claim_pod(suite, "bound", BITSTREAM)
    pod = suite.cluster.wait_pod(suite.namespace, "bound", running, "Running")
    _request, device = allocation_of(_resource(deployment), suite, "bound")
    claim = claim_of(deployment, "bound")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["bindingConditions"] for r in results] == [[BOUND_CONDITION]]
    entry = our_entry(claim, device)
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == (BOUND_CONDITION, "True", "Programmed")
    assert ready["lastTransitionTime"] <= scheduled_at(raw("pod", "bound", suite.namespace))
    assert entry["data"]["bitstream"] == BITSTREAM
    assert len(entry["data"]["sha256"]) == 64
    assert entry["data"]["slot"] == device
    assert pod.status.phase == "Running"
    reasons = suite.cluster.reasons(suite.namespace, "bound")
    assert "FpgaSlotProgrammed" in reasons or "FpgaSlotCacheHit" in reasons, reasons


def test_health_in_the_pods_status_follows_the_slot_and_its_taint(deployment: Deployment) -> None:
    suite = deployment.suite
    _request, device = allocation_of(_resource(deployment), suite, "bound")

    def health() -> tuple[str, str] | None:
        statuses = raw("pod", "bound", suite.namespace)["status"]["containerStatuses"]
        for claim in statuses[0].get("allocatedResourcesStatus") or []:
            for found in claim.get("resources") or []:
                return str(found.get("health")), str(found.get("message") or "")
        return None

    wait_for("the slot Healthy in the pod's status", lambda: (health() or ("", ""))[0] == "Healthy")
    write_fault(deployment, device, "unhealthy", "e2e: configuration CRC error")
    try:
        wait_for("the slot Unhealthy in the pod's status", lambda: (health() or ("", ""))[0] == "Unhealthy")
        health_now = health()
        assert health_now is not None
        assert "e2e: configuration CRC error" in health_now[1]
        assert UNHEALTHY_TAINT in taints(suite.node)[device]
    finally:
        remove_fault(deployment, device, "unhealthy")
    wait_for("the slot Healthy again in the pod's status", lambda: (health() or ("", ""))[0] == "Healthy")
    wait_for("the taint gone", lambda: UNHEALTHY_TAINT not in taints(suite.node)[device])
    suite.delete_pod("bound")


def test_without_binding_conditions_the_claim_still_says_what_its_slot_holds(deployment: Deployment) -> None:
    suite = deployment.suite
    set_binding_conditions(deployment, False)
    try:
        claim_pod(suite, "plain", BITSTREAM)
        suite.cluster.wait_pod(suite.namespace, "plain", running, "Running")
        _request, device = allocation_of(_resource(deployment), suite, "plain")
        claim = claim_of(deployment, "plain")
        assert "bindingConditions" not in claim["status"]["allocation"]["devices"]["results"][0]
        entry = wait_for("the claim's data", lambda: our_entry(claim_of(deployment, "plain"), device).get("data"))
        assert entry["bitstream"] == BITSTREAM
        assert entry["slot"] == device
        suite.delete_pod("plain")

        # A failed programming ends as it always has without binding conditions: the pod is bound, the kubelet's
        # prepare fails with the agent's error in its Event, and its retry programs the slot.
        assert apply_template(suite, SAMPLE).returncode == 0
        for slot in raw_slice(suite.node)["spec"]["devices"]:
            write_fault(deployment, slot["name"], "fail-next", "e2e: bitstream rejected by the slot")
        time.sleep(2.5)  # the agent looks at the fault files every second
        claim_pod(suite, "prepared-again", SAMPLE)
        suite.cluster.wait_pod(suite.namespace, "prepared-again", running, "Running")
        reasons = suite.cluster.reasons(suite.namespace, "prepared-again")
        assert "FailedPrepareDynamicResources" in reasons, reasons
        assert "FpgaProgrammingFailed" not in reasons
        suite.delete_pod("prepared-again")
    finally:
        set_binding_conditions(deployment, True)


def _resource(deployment: Deployment) -> Any:
    return client.ResourceV1Api(deployment.cluster.api)

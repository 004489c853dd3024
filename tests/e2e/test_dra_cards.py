"""Whole cards on the real cluster (DRA mode, FPGA_AGENT_WHOLE_CARDS=true, the sim overlay's card of two slots):
the real scheduler gives out the card only while both slots are free and a slot only while the card is not held;
the card's pod gets every slot's device node and the card is programmed with the sample whole-card image; after
the card is released, the next slot claim programs its slot from the restored base layout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.dra.cards import CARD_TAINT
from agent.dra.constants import DRIVER_NAME
from agent.simfpga.sample import SAMPLE_CARD_NAME, SAMPLE_NAME
from tests.e2e.cluster import Cluster, Suite, running, wait_for
from tests.e2e.deployment import NAMESPACE, SLOTS, Deployment, deploy_as_configured, dra_components, kubectl

NOT_ALLOCATABLE = "cannot allocate all claims"


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    with deploy_as_configured(cluster, pytestconfig, dra_components(pytestconfig)) as deployed:
        # Not under test here (tests/e2e/test_dra_agent.py tests it): the bitstream webhook.
        kubectl("delete", "validatingwebhookconfiguration", "fpga-slot-bitstreams", "--ignore-not-found")
        kubectl(
            "set", "env", "-n", NAMESPACE, "daemonset/fpga-slot-agent", "-c", "agent", "FPGA_AGENT_WHOLE_CARDS=true"
        )  # fmt: skip
        deployed.wait_rolled_out()
        wait_for("the card device in the slice", lambda: any(d["name"].startswith("card-") for d in devices(deployed)))
        yield deployed


def raw(kind: str, name: str, namespace: str = "") -> dict[str, Any]:
    got: dict[str, Any] = json.loads(
        kubectl("get", kind, name, "-o", "json", *(["-n", namespace] if namespace else []))
    )
    return got


def devices(deployment: Deployment) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = raw("resourceslice", f"{deployment.suite.node}-{DRIVER_NAME}")["spec"]["devices"]
    return found


def held(deployment: Deployment) -> dict[str, str]:
    """Device name -> the bitstream attribute the slice publishes for it."""
    return {d["name"]: d["attributes"]["bitstream"]["string"] for d in devices(deployment)}


def card_pod(suite: Suite, name: str) -> None:
    """A pod with a claim for a whole card, programmed with the sample whole-card image."""
    request = {
        "name": "card",
        "exactly": {
            "deviceClassName": "fpga-card",
            "tolerations": [{"key": CARD_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    _pod(suite, name, request, SAMPLE_CARD_NAME, 'echo "FPGA_SLOTS=$FPGA_SLOTS"; ls /dev/fpga-sim; sleep 3600')


def slot_pod(suite: Suite, name: str) -> None:
    """A pod with a claim for one slot, programmed with the sample slot image."""
    request = {"name": "card", "exactly": {"deviceClassName": "fpga-slot"}}
    _pod(suite, name, request, SAMPLE_NAME, 'echo "FPGA_SLOTS=$FPGA_SLOTS"; sleep 3600')


def _pod(suite: Suite, name: str, request: dict[str, Any], bitstream: str, command: str) -> None:
    config = [{"opaque": {"driver": DRIVER_NAME, "parameters": {"bitstream": bitstream}}}]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": suite.namespace},
        "spec": {"spec": {"devices": {"requests": [request], "config": config}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": suite.namespace},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": suite.node_hostname},
            "resourceClaims": [{"name": "fpga", "resourceClaimTemplateName": name}],
            "containers": [
                {
                    "name": "main",
                    "image": suite.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                    "resources": {"claims": [{"name": "fpga"}]},
                }
            ],
        },
    }
    custom = client.CustomObjectsApi(suite.cluster.api)
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", suite.namespace, "resourceclaimtemplates", template)
    suite.cluster.core.create_namespaced_pod(suite.namespace, pod)


def waits_for_the_card(suite: Suite, name: str) -> bool:
    """Whether the scheduler left the pod unscheduled because its claim cannot be allocated."""
    pod = suite.cluster.core.read_namespaced_pod(name, suite.namespace)
    if pod.spec.node_name:
        raise AssertionError(f"pod {name} was scheduled to {pod.spec.node_name}")
    events = suite.cluster.core.list_namespaced_event(suite.namespace, field_selector=f"involvedObject.name={name}")
    return any(e.reason == "FailedScheduling" and NOT_ALLOCATABLE in (e.message or "") for e in events.items)


def delete_pod(suite: Suite, name: str) -> None:
    kubectl("delete", "pod", "-n", suite.namespace, name, "--wait=true")
    suite.cluster.wait_pod_gone(suite.namespace, name)


def test_a_card_and_its_slots_are_never_held_at_once_and_a_slot_after_the_card_starts_from_the_base_layout(
    deployment: Deployment,
) -> None:
    suite = deployment.suite
    (card,) = [d["name"] for d in devices(deployment) if d["name"].startswith("card-")]
    slots = sorted(d["name"] for d in devices(deployment) if not d["name"].startswith("card-"))
    assert len(slots) == SLOTS

    slot_pod(suite, "small")
    suite.cluster.wait_pod(suite.namespace, "small", running, "Running")
    card_pod(suite, "whole")
    wait_for("the card claim waiting while a slot is held", lambda: waits_for_the_card(suite, "whole"))

    delete_pod(suite, "small")
    suite.cluster.wait_pod(suite.namespace, "whole", running, "Running")
    log = suite.cluster.wait_log(suite.namespace, "whole", lambda text: "FPGA_SLOTS=" in text, "FPGA_SLOTS")
    for slot in slots:
        assert slot in log, log  # every slot's device node, and FPGA_SLOTS naming it
    assert "FpgaCardProgrammed" in suite.cluster.reasons(suite.namespace, "whole")
    wait_for("the card's image in the slice", lambda: held(deployment)[card] == SAMPLE_CARD_NAME)
    assert all(held(deployment)[s] == "" for s in slots)

    slot_pod(suite, "after")
    wait_for("the slot claim waiting while the card is held", lambda: waits_for_the_card(suite, "after"))
    delete_pod(suite, "whole")
    suite.cluster.wait_pod(suite.namespace, "after", running, "Running")
    assert "FpgaSlotProgrammed" in suite.cluster.reasons(suite.namespace, "after")  # no hit: the base layout came back
    wait_for("the card's image gone from the slice", lambda: held(deployment)[card] == "")
    assert sorted(held(deployment)[s] for s in slots) == ["", SAMPLE_NAME]
    delete_pod(suite, "after")

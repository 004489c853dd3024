"""fpga-slot in DRA mode on the real cluster: the shipped manifests with the DRA-mode component
(daemonset/dra-mode) over the sim overlay, the real kubelet, scheduler and resourceclaim controller.

The agent registers the DRA driver with the kubelet (its readiness), publishes the node's slots as a
ResourceSlice, and programs a claim's slot at NodePrepareResources. Pods use the cache-aware claim
template of daemonset/examples/dra/cached-first.yaml (a slot holding the bitstream first, else any
slot, both of the selector-less class fpga-slot-cached, asked for by capacity; the pod's node selector
names the platform) and the fpga-scheduler with the DRA profile: the first pod's slot is programmed, the
slice then says so, and a second pod gets that slot through the first alternative with no
programming; the fpga-scheduler asks the extender to score each DRA pod. The extender's admission
webhook refuses a claim template (and a pod) naming a bitstream that no node has and nothing declares,
when it is applied; a bitstream undeclared after its template was accepted fails prepare with an Event
that names it (the agent's backstop); agent and kubelet restarts keep a prepared claim's pod running
and its slot held.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import SLOT_CAPACITY, bitstream_capacity
from agent.kube.nodefields import PLATFORM_LABEL
from agent.node.reconfigure import ANNOTATION
from agent.simfpga.fabric import PLATFORM
from tests.e2e.cluster import BITSTREAM, REGISTERED, WAIT_S, Cluster, Obj, Suite, running, wait_for, workload_pod_body
from tests.e2e.deployment import (
    EXTENDER,
    NAMESPACE,
    SCHEDULER,
    SLOTS,
    Deployment,
    deploy_as_configured,
    dra_components,
)

TEMPLATE = "fpga-cached-first"
SHOW_SLOT = 'echo "FPGA_SLOTS=$FPGA_SLOTS"; sleep 3600'
#: Longer than the agent takes to publish a changed node state (it renders at most twice a second).
STEADY_S = 3.0
#: The FpgaBitstream custom resource, and the webhook that refuses what no node has and nothing declares.
BITSTREAMS = ("example.com", "v1alpha1", "fpgabitstreams")
TEMPLATE_WEBHOOK = "claim-templates.bitstreams.fpga.example.com"
POD_WEBHOOK = "pods.bitstreams.fpga.example.com"
UNDECLARED = "e2e-undeclared"


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    with deploy_as_configured(cluster, pytestconfig, dra_components(pytestconfig)) as deployed:
        deployed.wait_available(SCHEDULER)
        deployed.wait_available(EXTENDER)
        suite = deployed.suite
        # The bitstream webhook is in force once the certificates' Job has set its caBundle and the extender has
        # listed the nodes (their catalogs) and the FpgaBitstream objects: until then (failurePolicy Ignore)
        # every template passes. From then on the catalog's bitstream is accepted and an unknown one refused.
        wait_for(
            "the bitstream webhook refusing an unknown bitstream",
            lambda: refused(apply_template(suite, UNDECLARED, dry_run=True)),
        )
        wait_for(
            "the bitstream webhook knowing the catalog's bitstream",
            lambda: apply_template(suite, BITSTREAM, dry_run=True).returncode == 0,
        )
        yield deployed


def apply_template(
    suite: Suite, bitstream: str, *, dry_run: bool = False, name: str = ""
) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -f`` of the cache-aware template for ``bitstream`` (a YAML file, as a user applies it),
    named ``name`` when given."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="fpga-slot-e2e-") as manifest:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            **cached_first_template(suite.namespace, bitstream),
        }
        if name:
            body["metadata"]["name"] = name
        manifest.write(json.dumps(body))
        manifest.flush()
        args = ["kubectl", "apply", "-f", manifest.name, *(["--dry-run=server"] if dry_run else [])]
        return subprocess.run(args, capture_output=True, text=True, timeout=WAIT_S, check=False)


def refused(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode != 0 and f'admission webhook "{TEMPLATE_WEBHOOK}" denied the request' in done.stderr


def fpga_bitstream(name: str, scope: str = "slot") -> dict[str, Any]:
    """A declaration the extender accepts (its source is never pulled here: no pod asks for it on a node), of an
    image for ``scope`` (slot or card)."""
    return {
        "apiVersion": "example.com/v1alpha1",
        "kind": "FpgaBitstream",
        "metadata": {"name": name},
        "spec": {
            "platform": PLATFORM,
            "acceleratorId": "e2e0000000000000000000000000dec1",
            "sha256": "ab" * 32,
            "size": 4096,
            "source": {"oci": "localhost:5000/fpga/e2e-declared:1"},
            "scope": scope,
        },
    }


@contextlib.contextmanager
def declared(cluster: Cluster, name: str, scope: str = "slot") -> Iterator[None]:
    custom = client.CustomObjectsApi(cluster.api)
    custom.create_cluster_custom_object(*BITSTREAMS, fpga_bitstream(name, scope))
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*BITSTREAMS, name)


@pytest.fixture(scope="module")
def resource(cluster: Cluster) -> Any:
    return client.ResourceV1Api(cluster.api)


def stays(check: Callable[[], bool], seconds: float) -> bool:
    """Whether ``check`` holds at every look for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not check():
            return False
        time.sleep(0.2)
    return True


def slice_uid(resource: Any, node: str) -> str | None:
    try:
        uid: str = resource.read_resource_slice(f"{node}-{DRIVER_NAME}").metadata.uid
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return uid


def slice_devices(resource: Any, node: str) -> dict[str, dict[str, Any]]:
    """The node's slice of our driver: device name -> attribute values; {} while there is none."""
    try:
        found = resource.read_resource_slice(f"{node}-{DRIVER_NAME}")
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return {
        d.name: {name: next(v for v in (a.string, a.int, a.bool) if v is not None) for name, a in d.attributes.items()}
        for d in found.spec.devices or []
    }


def cached_first_template(namespace: str, bitstream: str) -> dict[str, Any]:
    """daemonset/examples/dra/cached-first.yaml for the sim platform and ``bitstream``."""
    parameters = {"bitstream": bitstream}
    return {
        "metadata": {"name": f"{TEMPLATE}-{bitstream}", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "fpga",
                            "firstAvailable": [
                                {
                                    "name": "cached",
                                    "deviceClassName": "fpga-slot-cached",
                                    "capacity": {"requests": {bitstream_capacity(bitstream): "1"}},
                                },
                                {
                                    "name": "any",
                                    "deviceClassName": "fpga-slot-cached",
                                    "capacity": {"requests": {SLOT_CAPACITY: "1"}},
                                },
                            ],
                        }
                    ],
                    "config": [{"requests": ["fpga"], "opaque": {"driver": DRIVER_NAME, "parameters": parameters}}],
                }
            }
        },
    }


def claim_pod(suite: Suite, name: str, bitstream: str, claim: str = "") -> Obj:
    """A pod of the fpga-scheduler with a claim made from the template for ``bitstream`` (or the claim ``claim``)."""
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": f"{TEMPLATE}-{bitstream}"}
    body = {
        "metadata": {"name": name, "namespace": suite.namespace},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "nodeSelector": {PLATFORM_LABEL: PLATFORM},  # as cached-first.yaml: a node of one platform
            "resourceClaims": [{"name": "fpga", **source}],
            "containers": [
                {
                    "name": "main",
                    "image": suite.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SHOW_SLOT],
                    "resources": {"claims": [{"name": "fpga"}]},
                }
            ],
        },
    }
    return suite.cluster.core.create_namespaced_pod(suite.namespace, body)


def allocation_of(resource: Any, suite: Suite, pod: str) -> tuple[str, str]:
    """(request, device) of the pod's claim as the scheduler allocated it."""
    status = suite.cluster.core.read_namespaced_pod(pod, suite.namespace).status
    (claim_status,) = status.resource_claim_statuses
    claim = resource.read_namespaced_resource_claim(claim_status.resource_claim_name, suite.namespace)
    (result,) = claim.status.allocation.devices.results
    assert (result.driver, result.pool) == (DRIVER_NAME, suite.node)
    return result.request, result.device


def new_agent_pod(deployment: Deployment, killed: str) -> bool:
    """Whether the node's agent pod (the one not being deleted) is another than ``killed``; False while there is
    none (the DaemonSet has not made it yet)."""
    pods = deployment.cluster.core.list_namespaced_pod(
        NAMESPACE,
        label_selector="app.kubernetes.io/component=agent",
        field_selector=f"spec.nodeName={deployment.suite.node}",
    ).items
    live = [p.metadata.name for p in pods if p.metadata.deletion_timestamp is None]
    return len(live) == 1 and live[0] != killed


def slot_is_free(suite: Suite, slot: str) -> bool | None:
    """Whether the agent's published node state calls ``slot`` free (None: not published)."""
    published = suite.cluster.node_state(NAMESPACE, suite.node) or []
    return next((entry["free"] for entry in published if entry["id"] == slot), None)


def test_the_agent_in_dra_mode_is_ready_once_registered_and_publishes_every_slot(
    deployment: Deployment, resource: Any
) -> None:
    suite = deployment.suite
    log = suite.cluster.logs(NAMESPACE, suite.agent_pod)
    assert f"kubelet registered DRA driver {DRIVER_NAME}" in log
    assert REGISTERED not in log  # no device plugin in DRA mode
    devices = wait_for("the node's ResourceSlice", lambda: slice_devices(resource, suite.node))
    assert len(devices) == SLOTS
    assert {d["platform"] for d in devices.values()} == {PLATFORM}
    # Only what claims select on (health is the device taint): platform, card, numa when known, bitstream.
    assert {frozenset(d) - {"numa"} for d in devices.values()} == {frozenset({"platform", "card", "bitstream"})}
    found = resource.read_resource_slice(f"{suite.node}-{DRIVER_NAME}")
    assert not any(d.taints for d in found.spec.devices)


def test_a_claim_is_programmed_at_prepare_and_the_next_pod_gets_that_slot_without_programming(
    deployment: Deployment, resource: Any
) -> None:
    suite = deployment.suite
    template = cached_first_template(suite.namespace, BITSTREAM)
    resource.create_namespaced_resource_claim_template(suite.namespace, template)
    wait_for("the node's ResourceSlice", lambda: slice_devices(resource, suite.node))

    claim_pod(suite, "first", BITSTREAM)
    suite.cluster.wait_pod(suite.namespace, "first", running, "Running")
    request, device = allocation_of(resource, suite, "first")
    assert request == "fpga/any"  # no slot held the bitstream yet
    assert "FpgaSlotProgrammed" in suite.cluster.reasons(suite.namespace, "first")
    shows = lambda: slice_devices(resource, suite.node)[device]["bitstream"] == BITSTREAM  # noqa: E731
    wait_for("the bitstream in the slice", shows)
    wait_for("the slot held in the node state", lambda: slot_is_free(suite, device) is False)
    # The container got the slot through the CDI spec the agent wrote (device name = slot ID here).
    assert suite.slots_of_pod("first") == device
    suite.delete_pod("first")
    wait_for("the slot free after release", lambda: slot_is_free(suite, device) is True)

    claim_pod(suite, "second", BITSTREAM)
    suite.cluster.wait_pod(suite.namespace, "second", running, "Running")
    assert allocation_of(resource, suite, "second") == ("fpga/cached", device)
    reasons = suite.cluster.reasons(suite.namespace, "second")
    assert "FpgaSlotCacheHit" in reasons
    assert "FpgaSlotProgrammed" not in reasons
    wait_for("the slot held by the second pod", lambda: slot_is_free(suite, device) is False)
    killed = suite.agent_pod

    # The agent restarts (SIGKILL; the DaemonSet starts it again): the prepared claim's slot stays held.
    suite.cluster.core.delete_namespaced_pod(suite.agent_pod, NAMESPACE, grace_period_seconds=0)
    wait_for("a new agent pod", lambda: new_agent_pod(deployment, killed))
    deployment.wait_rolled_out()
    registered = f"kubelet registered DRA driver {DRIVER_NAME}"
    log = suite.cluster.wait_log(NAMESPACE, suite.agent_pod, lambda t: registered in t, "the driver registered")
    # The new agent publishes its node state only where it differs: a lost holder would show within a second.
    assert stays(lambda: slot_is_free(suite, device) is False, STEADY_S), log

    # The kubelet restarts: it deletes the node's slices; the agent publishes them again (a new object).
    before = resource.read_resource_slice(f"{suite.node}-{DRIVER_NAME}").metadata.uid
    suite.restart_kubelet()
    deployment.wait_rolled_out()
    wait_for("a new slice after the kubelet restart", lambda: slice_uid(resource, suite.node) not in (None, before))
    pod = suite.cluster.core.read_namespaced_pod("second", suite.namespace)
    assert running(pod)
    assert pod.status.container_statuses[0].restart_count == 0
    assert slot_is_free(suite, device) is False
    suite.delete_pod("second")
    wait_for("the slot free after release", lambda: slot_is_free(suite, device) is True)


def test_a_template_naming_an_unknown_bitstream_is_refused_when_applied_and_a_declared_one_accepted(
    deployment: Deployment, resource: Any
) -> None:
    suite = deployment.suite
    done = apply_template(suite, UNDECLARED)
    assert refused(done), done.stderr
    message = done.stderr
    assert f"bitstream '{UNDECLARED}' (spec.spec.devices.config[0].opaque.parameters.bitstream) is unknown" in message
    assert "declare it with an FpgaBitstream object" in message
    with pytest.raises(ApiException) as gone:
        resource.read_namespaced_resource_claim_template(f"{TEMPLATE}-{UNDECLARED}", suite.namespace)
    assert gone.value.status == 404

    # A pod asking for a slot through the extended resource with that bitstream is refused too.
    pod = workload_pod_body(suite.namespace, "undeclared", None, suite.image, 1, UNDECLARED, "true", SCHEDULER)
    with pytest.raises(ApiException) as refusal:
        suite.cluster.core.create_namespaced_pod(suite.namespace, pod, dry_run="All")
    assert refusal.value.status == 403
    message = json.loads(refusal.value.body)["message"]
    assert message.startswith(f'admission webhook "{POD_WEBHOOK}" denied the request: ')
    assert f"bitstream '{UNDECLARED}' (annotation {ANNOTATION}) is unknown" in message
    known = workload_pod_body(suite.namespace, "known", None, suite.image, 1, BITSTREAM, "true", SCHEDULER)
    suite.cluster.core.create_namespaced_pod(suite.namespace, known, dry_run="All")  # the catalog's: admitted

    # Declared by an FpgaBitstream: accepted (once the extender's watch has it).
    name = "e2e-declared"
    with declared(suite.cluster, name):
        wait_for("the declaration at the webhook", lambda: apply_template(suite, name, dry_run=True).returncode == 0)
        done = apply_template(suite, name)
        assert done.returncode == 0, done.stderr
        resource.read_namespaced_resource_claim_template(f"{TEMPLATE}-{name}", suite.namespace)

    # Declared an image for a whole card: the template's requests ask for slots, so it is refused naming both.
    card_image = "e2e-declared-card"
    with declared(suite.cluster, card_image, scope="card"):
        wait_for(
            "the card declaration at the webhook",
            lambda: "for a whole card" in apply_template(suite, card_image, dry_run=True).stderr,
        )
        done = apply_template(suite, card_image)
        assert refused(done), done.stderr
        assert (
            f"bitstream '{card_image}' (spec.spec.devices.config[0].opaque.parameters.bitstream) is declared an "
            "image for a whole card" in done.stderr
        ), done.stderr


def test_a_bitstream_undeclared_after_it_was_accepted_holds_no_slot_or_fails_prepare_naming_it(
    deployment: Deployment, resource: Any
) -> None:
    """A template and a claim accepted while an FpgaBitstream declared their bitstream, which is then deleted: a
    pod of the template never gets its claim (the claim the controller makes for it is refused, the pod stays
    Pending with that reason, no slot is allocated); a pod of the claim made before is allocated a slot, and the
    agent's refusal at prepare (the backstop) names the bitstream."""
    suite = deployment.suite
    missing = "e2e-withdrawn"
    spec = cached_first_template(suite.namespace, missing)["spec"]["spec"]
    with declared(suite.cluster, missing):
        wait_for("the declaration at the webhook", lambda: apply_template(suite, missing, dry_run=True).returncode == 0)
        assert apply_template(suite, missing).returncode == 0
        claim = {"metadata": {"name": "withdrawn", "namespace": suite.namespace}, "spec": spec}
        resource.create_namespaced_resource_claim(suite.namespace, claim)
    # (A new template, not the one accepted: an update is refused only for a bitstream its old object lacked.)
    probe = lambda: apply_template(suite, missing, dry_run=True, name="withdrawal-probe")  # noqa: E731
    wait_for("the withdrawal at the webhook", lambda: refused(probe()))
    before = slice_devices(resource, suite.node)

    claim_pod(suite, "from-template", missing)
    event = suite.cluster.wait_event(
        suite.namespace, "from-template", {"FailedResourceClaimCreation"}, saying=f"bitstream '{missing}'"
    )
    assert 'admission webhook "claims.bitstreams.fpga.example.com" denied the request' in event.message
    pod = suite.cluster.core.read_namespaced_pod("from-template", suite.namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name  # never scheduled: no claim, no slot
    suite.delete_pod("from-template")

    claim_pod(suite, "from-claim", missing, claim="withdrawn")
    # (The kubelet retries a failed prepare: an earlier attempt may have failed for another reason, such as an
    # agent that had not yet seen the declaration go.)
    event = suite.cluster.wait_event(
        suite.namespace, "from-claim", {"FailedPrepareDynamicResources"}, saying=f"'{missing}' is not in the catalog"
    )
    assert "no FpgaBitstream declares it either" in event.message, event.message
    pod = suite.cluster.core.read_namespaced_pod("from-claim", suite.namespace)
    assert pod.status.phase == "Pending"
    assert {name: d["bitstream"] for name, d in slice_devices(resource, suite.node).items()} == {
        name: d["bitstream"] for name, d in before.items()
    }
    suite.delete_pod("from-claim")
    resource.delete_namespaced_resource_claim("withdrawn", suite.namespace)


def fake_node_slice(node: str) -> dict[str, Any]:
    """A ResourceSlice of our driver for a node without a kubelet: one empty slot of the sim platform."""
    return {
        "metadata": {"name": f"{node}-{DRIVER_NAME}"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "slot0",
                    "attributes": {
                        "platform": {"string": PLATFORM},
                        "bitstream": {"string": ""},
                    },
                    "capacity": {SLOT_CAPACITY: {"value": "1"}},  # as every slot publishes it
                }
            ],
        },
    }


def test_the_fpga_scheduler_asks_the_extender_to_score_a_dra_pod(deployment: Deployment, resource: Any) -> None:
    """The DRA profile calls the extender's prioritize for a pod that holds its slot through a claim (no
    managedResources: the pod requests no extended resource). The scheduler scores only when more than one node
    fits, so a second node (a Node object and a ResourceSlice, no kubelet) offers a slot too."""
    suite = deployment.suite
    template = cached_first_template(suite.namespace, BITSTREAM)
    with contextlib.suppress(ApiException):  # made by an earlier test of this module
        resource.create_namespaced_resource_claim_template(suite.namespace, template)
    wait_for("the node's ResourceSlice", lambda: slice_devices(resource, suite.node))
    with deployment.fake_nodes(1) as (fake,):
        resource.create_resource_slice(fake_node_slice(fake))
        suite.cluster.core.patch_node(fake, {"metadata": {"labels": {PLATFORM_LABEL: PLATFORM}}})  # as an agent does
        try:
            before = deployment.extender_calls("prioritize")
            claim_pod(suite, "scored", BITSTREAM)
            pod = suite.cluster.wait_pod(suite.namespace, "scored", lambda p: bool(p.spec.node_name), "scheduled")
            after = deployment.extender_calls("prioritize")
            assert after > before, (
                f"{before} prioritize calls before the DRA pod, {after} after (on {pod.spec.node_name})"
            )
        finally:
            suite.delete_pod("scored")
            with contextlib.suppress(ApiException):
                resource.delete_resource_slice(f"{fake}-{DRIVER_NAME}")

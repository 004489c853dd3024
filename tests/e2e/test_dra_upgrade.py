"""fpga-slot in DRA mode on the real cluster, the parts a platform team relies on day to day: a rolling update
of the agent while pods with claims are being created (the new pod serves beside the old one; no prepare
fails, running pods are left alone), and a pod written for the device plugin (it asks for
example.com/fpga-slot and names its bitstream in the annotation) running unchanged on a DRA node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.deviceplugin.constants import RESOURCE_NAME
from agent.dra.constants import DRIVER_NAME
from agent.node.reconfigure import ANNOTATION
from tests.e2e.cluster import BITSTREAM, REPO, Cluster, Suite, running, wait_for
from tests.e2e.deployment import AGENT, NAMESPACE, Deployment, deploy_as_configured
from tests.e2e.test_dra_agent import cached_first_template, claim_pod

SHOW_SLOT = 'echo "FPGA_SLOTS=$FPGA_SLOTS"; sleep 3600'
#: Pods created one after another while the agent is updated (the node has two slots: one holds "steady").
CHURN_PODS = 6


@pytest.fixture(scope="module")
def deployment(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Deployment]:
    with deploy_as_configured(cluster, pytestconfig, (REPO / "daemonset" / "dra-mode",)) as deployed:
        client.ResourceV1Api(cluster.api).create_namespaced_resource_claim_template(
            deployed.suite.namespace, cached_first_template(deployed.suite.namespace, BITSTREAM)
        )
        yield deployed


def failed_prepares(suite: Suite) -> list[str]:
    events = suite.cluster.core.list_namespaced_event(suite.namespace).items
    return [f"{e.involved_object.name}: {e.message}" for e in events if e.reason == "FailedPrepareDynamicResources"]


def agent_pods(deployment: Deployment) -> list[Any]:
    return deployment.cluster.core.list_namespaced_pod(
        NAMESPACE,
        label_selector="app.kubernetes.io/component=agent",
        field_selector=f"spec.nodeName={deployment.suite.node}",
    ).items


def churn(suite: Suite, done: list[str], errors: list[str]) -> None:
    """Create claim pods one after another: each must run, then it is deleted (its claim unprepared)."""
    try:
        for index in range(CHURN_PODS):
            name = f"churn-{index}"
            claim_pod(suite, name, BITSTREAM)
            suite.cluster.wait_pod(suite.namespace, name, running, "Running")
            # A graceful delete: the pod goes once the kubelet has unprepared its claim (a forced one would let
            # the next pod's claim reach the slot first, and be refused until then).
            suite.cluster.core.delete_namespaced_pod(name, suite.namespace, grace_period_seconds=1)
            suite.cluster.wait_pod_gone(suite.namespace, name)
            done.append(name)
    except Exception as exc:  # reported by the test thread
        errors.append(f"{type(exc).__name__}: {exc}")


def test_a_rolling_update_while_claims_are_prepared_fails_no_prepare_and_leaves_running_pods_alone(
    deployment: Deployment,
) -> None:
    suite = deployment.suite
    claim_pod(suite, "steady", BITSTREAM)
    steady = suite.cluster.wait_pod(suite.namespace, "steady", running, "Running")
    started = steady.status.container_statuses[0].state.running.started_at
    old = deployment.agent_pod().metadata.name

    done: list[str] = []
    errors: list[str] = []
    worker = threading.Thread(target=churn, args=(suite, done, errors), name="churn")
    worker.start()
    try:
        wait_for("the first churn pod", lambda: done or errors)
        # kubectl rollout restart: a new template, so the DaemonSet replaces the agent pod.
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {"spec": {"template": {"metadata": {"annotations": {"example.com/restarted-at": stamp}}}}}
        deployment.cluster.apps.patch_namespaced_daemon_set(AGENT, NAMESPACE, patch)
        # maxSurge 1: the new pod runs beside the old one before the old one goes.
        wait_for("two agent pods at once", lambda: len(agent_pods(deployment)) == 2)
        new = deployment.wait_rolled_out().metadata.name
        assert new != old
    finally:
        worker.join()
    assert errors == []
    assert len(done) == CHURN_PODS
    assert failed_prepares(suite) == []
    steady = suite.cluster.core.read_namespaced_pod("steady", suite.namespace)
    assert running(steady)
    assert steady.status.container_statuses[0].restart_count == 0
    assert steady.status.container_statuses[0].state.running.started_at == started
    # The new agent releases the claim the old one prepared.
    suite.delete_pod("steady")
    log = suite.cluster.logs(NAMESPACE, new)
    assert f"kubelet registered DRA driver {DRIVER_NAME}" in log


def test_a_pod_written_for_the_device_plugin_runs_unchanged_on_a_dra_node(deployment: Deployment) -> None:
    suite = deployment.suite
    suite.forget_device_plugin()  # earlier tests ran the device plugin here
    deployment.wait_rolled_out()
    body = {
        "metadata": {"name": "dp-style", "namespace": suite.namespace, "annotations": {ANNOTATION: BITSTREAM}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": suite.node_hostname},
            "containers": [
                {
                    "name": "main",
                    "image": suite.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SHOW_SLOT],
                    "resources": {"limits": {RESOURCE_NAME: "1"}},
                }
            ],
        },
    }
    suite.cluster.core.create_namespaced_pod(suite.namespace, body)
    pod = suite.cluster.wait_pod(suite.namespace, "dp-style", running, "Running")
    status = pod.status.extended_resource_claim_status
    assert status is not None, "the scheduler made no claim for the extended resource"
    (mapping,) = status.request_mappings
    assert (mapping.container_name, mapping.resource_name) == ("main", RESOURCE_NAME)
    claim = client.ResourceV1Api(suite.cluster.api).read_namespaced_resource_claim(
        status.resource_claim_name, suite.namespace
    )
    (result,) = claim.status.allocation.devices.results
    assert (result.driver, result.pool) == (DRIVER_NAME, suite.node)
    # Programmed at prepare with the annotation's bitstream; the slot reached the container through CDI.
    assert "FpgaSlotProgrammed" in suite.cluster.reasons(suite.namespace, "dp-style") or "FpgaSlotCacheHit" in (
        suite.cluster.reasons(suite.namespace, "dp-style")
    )
    assert suite.slots_of_pod("dp-style") == result.device
    suite.delete_pod("dp-style")

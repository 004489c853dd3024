"""Uninstalling fpga-slot leaves no FPGA node behind, in either mode: when its DaemonSet is deleted, the agent
removes its platform labels from the Node and its FpgaNodeState on its clean stop (during an update it leaves
them for the next agent pod), and the garbage collector would remove the object with the DaemonSet anyway.

A plain ``kubectl delete -k`` deletes the agent's ServiceAccount and RBAC in the same breath as its DaemonSet:
the agent still cleans its Node through the cleanup grant the install's Job made (owned by the Namespace; the
agent itself may create no RBAC object), and the
ServiceAccount's finalizer keeps its token valid until the agent that clears the last Node releases it; then
everything goes, the grant with the namespace. Deleting the DaemonSet alone (with foreground deletion) cleans
the Node too.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.kube.cleanupgrant import ACCOUNT, FINALIZER, grant_name
from tests.e2e.cluster import REPO, Cluster, wait_for
from tests.e2e.deployment import (
    AGENT,
    NAMESPACE,
    Deployment,
    deploy_as_configured,
    dra_components,
    fpga_agent_uninstall,
    kubectl,
)

GRANT_JOB = "fpga-slot-cleanup-grant"  # its ServiceAccount (daemonset/cleanup-grant-job.yaml)
PREFIXES = ("example.com/fpga-slots", "example.com/fpga-bitstreams", "example.com/fpga-agent", "example.com/fpga-pl")
LABEL_PREFIX = "fpga-platform.example.com/"
PLATFORM_LABEL = "example.com/fpga-platform"


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
        published = wait_for("the platform labels on the node", lambda: fpga_keys(cluster, node))
        assert all(k.startswith(LABEL_PREFIX) or k == PLATFORM_LABEL for k in published), published
        wait_for("the node's FpgaNodeState", lambda: cluster.node_state(NAMESPACE, node) is not None)
        agent = deployed.agent_pod().metadata.name
        log: list[str] = []
        reader = follow_log(cluster, agent, log)
        cluster.apps.delete_namespaced_daemon_set(AGENT, NAMESPACE, propagation_policy="Foreground")
        cluster.wait_pod_gone(NAMESPACE, agent)
        reader.join(timeout=10)
        tail = "\n".join(log[-15:])
        assert any("removing its slot state" in line for line in log), tail
        wait_for("no FPGA labels or annotations on the node", lambda: fpga_keys(cluster, node) == [])
        wait_for("no FpgaNodeState of the node", lambda: cluster.node_state(NAMESPACE, node) is None)


def may(cluster: Cluster, account: str, verb: str, resource: str) -> bool:
    """Whether the API server's authorizer lets the ServiceAccount ``account`` of fpga-slot do ``verb`` on RBAC
    ``resource`` (a SubjectAccessReview, as ``kubectl auth can-i --as`` asks)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{account}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
            "resourceAttributes": {"group": "rbac.authorization.k8s.io", "resource": resource, "verb": verb},
        },
    }
    answer = client.AuthorizationV1Api(cluster.api).create_subject_access_review(review)
    return bool(answer.status.allowed)


def grant_exists(cluster: Cluster, namespace_uid: str) -> bool:
    """Whether the agent's cleanup grant (ClusterRole and ClusterRoleBinding) of that namespace is there."""
    try:
        cluster.rbac.read_cluster_role(grant_name(namespace_uid))
        cluster.rbac.read_cluster_role_binding(grant_name(namespace_uid))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def unstick(cluster: Cluster, node: str) -> None:
    """After a failed uninstall: the Node's keys and the account's finalizer removed by hand (not through the
    command under test), so that the namespace can go and the next test can install again."""
    keys = fpga_keys(cluster, node)
    if keys:
        body = {"metadata": {"annotations": dict.fromkeys(keys), "labels": dict.fromkeys(keys)}}
        cluster.core.patch_node(node, body)
    with contextlib.suppress(ApiException):
        cluster.core.patch_namespaced_service_account(ACCOUNT, NAMESPACE, {"metadata": {"finalizers": None}})


def namespace_gone(cluster: Cluster) -> bool:
    try:
        cluster.core.read_namespace(NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def one_step_components(pytestconfig: pytest.Config, mode: str) -> tuple[Path, ...]:
    return dra_components(pytestconfig) if mode == "dra" else ()


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_kubectl_delete_k_alone_leaves_no_fpga_node_and_no_object_behind(
    cluster: Cluster, pytestconfig: pytest.Config, mode: str
) -> None:
    with deploy_as_configured(cluster, pytestconfig, one_step_components(pytestconfig, mode)) as deployed:
        node = deployed.suite.node
        published = wait_for("the platform labels on the node", lambda: fpga_keys(cluster, node))
        assert any(k.startswith(LABEL_PREFIX) for k in published)
        wait_for("the node's FpgaNodeState", lambda: cluster.node_state(NAMESPACE, node))
        uid = cluster.core.read_namespace(NAMESPACE).metadata.uid
        wait_for("the cleanup grant from the install's Job", lambda: grant_exists(cluster, uid))
        # Made by the Job's account; the agents (on every node) may create, escalate or bind no RBAC object.
        assert may(cluster, GRANT_JOB, "create", "clusterroles")
        for resource in ("clusterroles", "clusterrolebindings", "roles", "rolebindings"):
            for verb in ("create", "update", "patch", "escalate", "bind"):
                assert not may(cluster, ACCOUNT, verb, resource), (verb, resource)
        try:
            uninstall_in_one_step(cluster, deployed, node, uid)
        finally:
            unstick(cluster, node)


def uninstall_in_one_step(cluster: Cluster, deployed: Deployment, node: str, namespace_uid: str) -> None:
    agent = deployed.agent_pod().metadata.name
    log: list[str] = []
    reader = follow_log(cluster, agent, log)
    # As a user uninstalls: one command, which waits until every object is gone (the namespace included).
    kubectl("delete", "-k", str(deployed.kustomization), "--timeout=150s")
    reader.join(timeout=10)
    tail = "\n".join(log[-15:])
    assert any("removing its slot state" in line for line in log), tail
    assert any("released the service account" in line for line in log), tail
    assert fpga_keys(cluster, node) == []
    assert cluster.node_state(NAMESPACE, node) is None
    left = kubectl("get", "-k", str(deployed.kustomization), "--ignore-not-found", "-o", "name")
    assert left.strip() == "", f"left after kubectl delete -k: {left}"
    wait_for("the cleanup grant to go with the namespace", lambda: not grant_exists(cluster, namespace_uid))


def test_a_node_left_with_fpga_keys_keeps_the_namespace_until_fpga_agent_uninstall(
    cluster: Cluster, pytestconfig: pytest.Config
) -> None:
    """A Node whose agent did not stop cleanly (here a Node object without a kubelet, carrying an agent's keys)
    keeps the ServiceAccount's finalizer after ``kubectl delete -k``: the namespace stays until an operator
    runs ``fpga-agent uninstall``, which clears that Node and lets everything go."""
    with deploy_as_configured(cluster, pytestconfig) as deployed:
        node = deployed.suite.node
        wait_for("the platform labels on the node", lambda: fpga_keys(cluster, node))
        uid = cluster.core.read_namespace(NAMESPACE).metadata.uid
        wait_for("the cleanup grant from the install's Job", lambda: grant_exists(cluster, uid))
        with deployed.fake_nodes(1) as (orphan,):
            left = {  # as an earlier version, which kept the slot state in annotations, would have left it
                "annotations": {"example.com/fpga-slots": "[]", "example.com/fpga-agent-heartbeat": "1"},
                "labels": {LABEL_PREFIX + "x": "true"},
            }
            cluster.core.patch_node(orphan, {"metadata": left})
            agent = deployed.agent_pod().metadata.name
            log: list[str] = []
            reader = follow_log(cluster, agent, log)
            try:
                kubectl("delete", "-k", str(deployed.kustomization), "--wait=false")
                cluster.wait_pod_gone(NAMESPACE, agent)
                reader.join(timeout=10)
                tail = "\n".join(log[-15:])
                assert any("removing its slot state" in line for line in log), tail
                assert any(f"node {orphan} still has slot state" in line for line in log), tail
                assert fpga_keys(cluster, node) == []
                account = cluster.core.read_namespaced_service_account(ACCOUNT, NAMESPACE)
                assert account.metadata.deletion_timestamp is not None
                assert account.metadata.finalizers == [FINALIZER]
                done = fpga_agent_uninstall()
                assert done.returncode == 0, done.stderr
                assert done.stdout.splitlines()[0].startswith(f"node {orphan}: removed "), done.stdout
                assert f"finalizer {FINALIZER} removed" in done.stdout, done.stdout
                assert fpga_keys(cluster, orphan) == []
                wait_for("the namespace to go", lambda: namespace_gone(cluster))
                wait_for("the cleanup grant to go with the namespace", lambda: not grant_exists(cluster, uid))
            finally:
                unstick(cluster, node)
                unstick(cluster, orphan)

"""fpga-slot installed, upgraded and uninstalled with Helm (deploy/helm/fpga-slot), in each mode, on the sim backend.

As docs/operations.md says to: the namespace made and labelled for privileged pods, ``helm install`` with the
sim values (on a cluster without DNS and kube-proxy, such as the bundled one, ``hostNetwork=true`` as the
``overlays/sim-hostnet`` overlay does), the example pod of daemonset/examples run (DRA: its bitstream declared
by the example FpgaBitstream, as the bitstream webhook asks); ``helm upgrade`` to another
tag of the image rolls the agent while that pod keeps running (in DRA mode while claim pods come and go, with
no failed prepare); ``helm uninstall`` leaves no FPGA label or annotation on the node, no FpgaNodeState and
none of the chart's cluster-scoped objects. The CRDs stay, as Helm leaves the CRDs of a chart's crds/.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.slots.published import GROUP, PLURAL, VERSION
from tests.deploy.helmchart import CHART, run, tool
from tests.e2e.cluster import REPO, Cluster, Suite, pick_node, running, wait_for
from tests.e2e.deployment import (
    AGENT,
    FPGA_NODE_LABEL,
    NAMESPACE,
    STATE_DIR,
    Deployment,
    fpga_agent_uninstall,
    kubectl,
    split_image,
)
from tests.e2e.test_dra_agent import cached_first_template, claim_pod
from tests.e2e.test_dra_upgrade import CHURN_PODS, failed_prepares
from tests.e2e.test_uninstall import follow_log, fpga_keys, namespace_gone

RELEASE = "fpga-slot"
EXAMPLES = REPO / "daemonset" / "examples"
#: The examples' bitstream: in every simulated node's catalog from the start, and declared for the whole cluster by
#: this FpgaBitstream (the same bytes, so nothing is pulled), which the DRA bitstream webhook knows.
SAMPLE = "aes-v1"
DECLARATION = EXAMPLES / "bitstreams" / "fpgabitstream.yaml"
CRDS = ("fpgabitstreams.example.com", "fpganodestates.example.com")


def helm(*args: str) -> str:
    done = run(tool("helm"), *args)
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def chart_values(pytestconfig: pytest.Config, mode: str) -> list[str]:
    repository, tag = split_image(pytestconfig.getoption("--e2e-image"))
    hostnet = Path(pytestconfig.getoption("--e2e-overlay")).name == "sim-hostnet"
    values = [f"mode={mode}", f"image.repository={repository}", f"image.tag={tag}", "sim.enabled=true"]
    return [*values, f"hostNetwork={str(hostnet).lower()}"]


def set_args(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def cluster_scoped_objects(values: list[str]) -> list[tuple[str, str]]:
    """(kind, name) of every cluster-scoped object the chart renders with ``values``, CRDs aside."""
    rendered = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *set_args(values))
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    return [(obj["kind"], obj["metadata"]["name"]) for obj in objects if "namespace" not in obj["metadata"]]


def exists(cluster: Cluster, kind: str, name: str) -> bool:
    api = cluster.api
    readers = {
        "ClusterRole": client.RbacAuthorizationV1Api(api).read_cluster_role,
        "ClusterRoleBinding": client.RbacAuthorizationV1Api(api).read_cluster_role_binding,
        "DeviceClass": client.ResourceV1Api(api).read_device_class,
        "ValidatingAdmissionPolicy": client.AdmissionregistrationV1Api(api).read_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": client.AdmissionregistrationV1Api(
            api
        ).read_validating_admission_policy_binding,
        "ValidatingWebhookConfiguration": client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration,
    }
    try:
        readers[kind](name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def example_objects(mode: str, image: str) -> list[dict[str, object]]:
    """The example of daemonset/examples for ``mode``, its containers on the image under test (the cluster may
    pull nothing)."""
    path = EXAMPLES / "dra" / "cached-first.yaml" if mode == "dra" else EXAMPLES / "pod.yaml"
    objects = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for obj in objects:
        if obj["kind"] == "Pod":
            for container in obj["spec"]["containers"]:
                container.update(image=image, imagePullPolicy="IfNotPresent")
    return objects


@contextlib.contextmanager
def prepared_node(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Suite]:
    """The node under test labelled for the agent, with no simulated state of an earlier run, and a namespace for
    the test's pods; all undone after (as tests.e2e.deployment.deploy does around ``kubectl apply -k``)."""
    node = pick_node(cluster, pytestconfig.getoption("--e2e-node"))
    namespace = f"fpga-slot-e2e-helm-{secrets.token_hex(3)}"
    cluster.core.create_namespace({"metadata": {"name": namespace, "labels": {"app.kubernetes.io/name": "fpga-slot"}}})
    image = pytestconfig.getoption("--e2e-image")
    suite = Suite(cluster, namespace, node, image, NAMESPACE, "", pytestconfig.getoption("--e2e-kubelet-restart"))
    forget_state = "rm -rf /host/sim-dev /host/checkpoint.json /host/dra-claims.json"
    try:
        suite.run_on_host("forget-state", forget_state, host_path=STATE_DIR)
        cluster.core.patch_node(node, {"metadata": {"labels": {FPGA_NODE_LABEL: "true"}}})
        yield suite
    finally:
        cluster.core.patch_node(node, {"metadata": {"labels": {FPGA_NODE_LABEL: None}}})
        suite.run_on_host("forget-state-after", forget_state, host_path=STATE_DIR)
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespace(namespace)


@contextlib.contextmanager
def helm_release(cluster: Cluster, pytestconfig: pytest.Config, values: list[str]) -> Iterator[Deployment]:
    """fpga-slot installed with Helm on the node under test; uninstalled (and its namespace deleted) after."""
    with prepared_node(cluster, pytestconfig) as suite:
        wait_for("no fpga-slot namespace left by an earlier test", lambda: namespace_gone(cluster))
        kubectl("create", "namespace", NAMESPACE)
        kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=privileged")
        try:
            began = time.monotonic()
            helm("install", RELEASE, str(CHART), "-n", NAMESPACE, *set_args(values))
            deployment = Deployment(suite, CHART)
            deployment.wait_rolled_out()
            print(f"helm install: agent Ready {time.monotonic() - began:.1f} s after the command")
            deployment.add_to_catalog()
            yield deployment
        finally:
            kubectl("delete", "-f", str(DECLARATION), "--ignore-not-found")
            run(tool("helm"), "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=150s")
            with contextlib.suppress(ApiException):
                cluster.core.delete_namespace(NAMESPACE)
            try:
                wait_for("the namespace fpga-slot to go", lambda: namespace_gone(cluster), timeout=150)
            except AssertionError:
                # An agent that did not stop cleanly keeps the namespace (docs/uninstall.md): finish as an
                # operator would, so that the next test can install, and still fail this one.
                fpga_agent_uninstall()
                wait_for("the namespace fpga-slot to go", lambda: namespace_gone(cluster), timeout=150)
                raise


def admitted(cluster: Cluster, template: dict[str, object]) -> bool:
    """Create the claim template; False while the bitstream webhook refuses it as unknown (the extender sees an
    FpgaBitstream a moment after it was made)."""
    namespace = str(template["metadata"]["namespace"])  # type: ignore[index]
    try:
        client.ResourceV1Api(cluster.api).create_namespaced_resource_claim_template(namespace, template)
    except ApiException as exc:
        if exc.status == 403 and "is unknown" in str(exc.body):
            return False
        raise
    return True


def churn(suite: Suite, done: list[str], errors: list[str]) -> None:
    """Claim pods for the sample bitstream, one after another: each must run, then it is deleted (as
    tests.e2e.test_dra_upgrade.churn does with the suite's own bitstream)."""
    try:
        for index in range(CHURN_PODS):
            name = f"churn-{index}"
            claim_pod(suite, name, SAMPLE)
            suite.cluster.wait_pod(suite.namespace, name, running, "Running")
            suite.cluster.core.delete_namespaced_pod(name, suite.namespace, grace_period_seconds=1)
            suite.cluster.wait_pod_gone(suite.namespace, name)
            done.append(name)
    except Exception as exc:  # reported by the test thread
        errors.append(f"{type(exc).__name__}: {exc}")


def claim_of(cluster: Cluster, namespace: str, pod: str) -> tuple[str, str]:
    """(request, device) the scheduler allocated to the pod's claim."""
    status = cluster.core.read_namespaced_pod(pod, namespace).status
    (claim_status,) = status.resource_claim_statuses
    claim = client.ResourceV1Api(cluster.api).read_namespaced_resource_claim(
        claim_status.resource_claim_name, namespace
    )
    (result,) = claim.status.allocation.devices.results
    return result.request, result.device


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_helm_install_runs_the_example_upgrade_rolls_the_agent_and_uninstall_leaves_nothing(
    cluster: Cluster, pytestconfig: pytest.Config, mode: str
) -> None:
    upgrade_image = pytestconfig.getoption("--e2e-upgrade-image")
    assert upgrade_image, "--e2e-upgrade-image: another tag of --e2e-image on the node (scripts/e2e makes one)"
    values = chart_values(pytestconfig, mode)
    scoped = cluster_scoped_objects(values)
    with helm_release(cluster, pytestconfig, values) as deployed:
        suite = deployed.suite
        node = suite.node
        # The example pod, as NOTES.txt says to run it.
        objects = example_objects(mode, suite.image)
        if mode == "dra":
            # Its claim template names the bitstream in the driver's config: the webhook admits it once it knows it.
            kubectl("apply", "-f", str(DECLARATION))
            (template,) = [obj for obj in objects if obj["kind"] == "ResourceClaimTemplate"]
            template["metadata"]["namespace"] = suite.namespace  # type: ignore[index]
            wait_for("the bitstream webhook to admit the example's template", lambda: admitted(cluster, template))
            objects = [obj for obj in objects if obj["kind"] == "Pod"]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as example:
            yaml.safe_dump_all(objects, example)
            example.flush()
            kubectl("apply", "-n", suite.namespace, "-f", example.name)
        (pod,) = [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Pod"]  # type: ignore[index]
        example_pod = cluster.wait_pod(suite.namespace, pod, running, "Running")
        assert suite.slots_of_pod(pod)
        if mode == "dra":
            request, _device = claim_of(cluster, suite.namespace, pod)
            assert request in ("fpga/cached", "fpga/any"), request
        started = example_pod.status.container_statuses[0].state.running.started_at

        # helm upgrade to another tag: the agent rolls, the example pod stays; DRA: claim pods come and go meanwhile.
        old_agent = deployed.agent_pod().metadata.name
        done: list[str] = []
        errors: list[str] = []
        worker = None
        if mode == "dra":
            wait_for("the churn's template", lambda: admitted(cluster, cached_first_template(suite.namespace, SAMPLE)))
            worker = threading.Thread(target=churn, args=(suite, done, errors), name="churn")
            worker.start()
            wait_for("the first churn pod", lambda: done or errors)
        try:
            _repository, tag = split_image(upgrade_image)
            began = time.monotonic()
            helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", f"image.tag={tag}")
            new_agent = deployed.wait_rolled_out()
            print(f"helm upgrade: agent rolled {time.monotonic() - began:.1f} s after the command")
        finally:
            if worker is not None:
                worker.join()
        assert new_agent.metadata.name != old_agent
        assert new_agent.spec.containers[0].image.endswith(f":{tag}")
        example_pod = cluster.core.read_namespaced_pod(pod, suite.namespace)
        assert running(example_pod)
        assert example_pod.status.container_statuses[0].restart_count == 0
        assert example_pod.status.container_statuses[0].state.running.started_at == started
        if mode == "dra":
            assert errors == []
            assert len(done) == CHURN_PODS
            assert failed_prepares(suite) == []
        suite.delete_pod(pod)

        # helm uninstall: the agents leave their Node clean; nothing of the chart's is left cluster-wide.
        assert [(kind, name) for kind, name in scoped if not exists(cluster, kind, name)] == []
        wait_for("the node's FpgaNodeState", lambda: cluster.node_state(NAMESPACE, node) is not None)
        log: list[str] = []
        reader = follow_log(cluster, new_agent.metadata.name, log)
        began = time.monotonic()
        helm("uninstall", RELEASE, "-n", NAMESPACE)
        cluster.wait_pod_gone(NAMESPACE, new_agent.metadata.name)
        reader.join(timeout=10)
        assert any("removing its slot state" in line for line in log), "\n".join(log[-15:])
        assert any("released the service account" in line for line in log), "\n".join(log[-15:])
        wait_for("no FPGA labels or annotations on the node", lambda: fpga_keys(cluster, node) == [])
        wait_for("no FpgaNodeState of the node", lambda: cluster.node_state(NAMESPACE, node) is None)
        print(f"helm uninstall: node clean {time.monotonic() - began:.1f} s after the command")
        wait_for("no chart object cluster-wide", lambda: [o for o in scoped if exists(cluster, *o)] == [])
        with pytest.raises(ApiException) as gone:  # the chart's one object in another namespace
            cluster.rbac.read_namespaced_role_binding("fpga-scheduler-authentication-reader", "kube-system")
        assert gone.value.status == 404
        left = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        assert left["items"] == []
        # Helm's convention: the CRDs of crds/ are installed once and never deleted (docs/operations.md).
        extensions = client.ApiextensionsV1Api(cluster.api)
        assert [extensions.read_custom_resource_definition(name).metadata.name for name in CRDS] == list(CRDS)
    assert fpga_keys(cluster, node) == []
    assert AGENT not in [ds.metadata.name for ds in cluster.apps.list_daemon_set_for_all_namespaces().items]

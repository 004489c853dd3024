"""Every manifest in daemonset/ is a valid object of a current Kubernetes release, and they fit together."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tomllib
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from tests.deploy.manifests import (
    DAEMONSET_DIR,
    EXAMPLES_DIR,
    NAMESPACE,
    REPO,
    Manifests,
    Obj,
    containers,
    examples,
    kustomization,
    object_id,
    pod_spec,
    render,
)

#: The newest release whose schemas kubernetes-validate ships (offline): a current one.
KUBERNETES_VERSION = kubernetes_validate.latest_version()
RENDERED = render()
EXAMPLES = examples()
IMAGE = "fpga-slot"
#: The one object that must live outside fpga-slot: kube-scheduler reads the client CA there.
ELSEWHERE = {"RoleBinding/kube-system/fpga-scheduler-authentication-reader"}


def test_the_schemas_are_of_a_current_release() -> None:
    major, minor = (int(part) for part in KUBERNETES_VERSION.split(".")[:2])
    assert (major, minor) >= (1, 36)


@pytest.mark.parametrize("obj", RENDERED + EXAMPLES, ids=object_id)
def test_validates_against_the_kubernetes_schema(obj: Obj) -> None:
    """Strict: an unknown or misspelt field fails as well as a wrong type."""
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(lambda ds: ds["spec"].update(updateStrategie={}), "updateStrategie", id="unknown-field"),
        pytest.param(
            lambda ds: ds["spec"]["template"]["spec"].update(hostNetwork="yes"), "hostNetwork", id="wrong-type"
        ),
    ],
)
def test_the_validation_catches_mistakes(change: Any, field: str) -> None:
    daemonset = copy.deepcopy(Manifests(RENDERED).get("DaemonSet", "fpga-slot-agent"))
    change(daemonset)
    with pytest.raises(kubernetes_validate.ValidationError, match=field):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSION, strict=True)


def test_every_file_is_applied_or_generated() -> None:
    spec = kustomization()
    used = set(spec["resources"]) | {name for gen in spec.get("configMapGenerator", []) for name in gen["files"]}
    present = {path.name for path in DAEMONSET_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert used == present
    assert "namespace" not in spec  # it would move the kube-system RoleBinding too


@pytest.mark.parametrize("obj", RENDERED, ids=object_id)
def test_namespaced_objects_live_in_fpga_slot(obj: Obj) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    namespace = obj["metadata"].get("namespace")
    if obj["kind"] in cluster_scoped:
        assert namespace is None
    elif object_id(obj) not in ELSEWHERE:
        assert namespace == NAMESPACE
    assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/name", "fpga-slot") == "fpga-slot"


def test_the_namespace_is_created() -> None:
    Manifests(RENDERED).get("Namespace", NAMESPACE)


WORKLOADS = [obj for obj in RENDERED if obj["kind"] in ("DaemonSet", "Deployment")]


@pytest.mark.parametrize("workload", WORKLOADS, ids=object_id)
def test_selectors_match_their_pods(workload: Obj) -> None:
    manifests = Manifests(RENDERED)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service_account = workload["spec"]["template"]["spec"]["serviceAccountName"]
    manifests.get("ServiceAccount", service_account, NAMESPACE)
    for obj in manifests.of_kind("Service") + manifests.of_kind("PodDisruptionBudget"):
        selector = obj["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        if selector.items() <= labels.items():
            assert obj["metadata"]["namespace"] == workload["metadata"]["namespace"]


@pytest.mark.parametrize("workload", WORKLOADS, ids=object_id)
def test_every_container_has_requests_limits_and_probes(workload: Obj) -> None:
    for container in containers(workload):
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"])
        assert "memory" in resources["limits"]
        assert "livenessProbe" in container
        assert "readinessProbe" in container
        assert container["imagePullPolicy"] == "IfNotPresent"


def project_version() -> str:
    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def test_our_image_is_the_package_version() -> None:
    (entry,) = [image for image in kustomization()["images"] if image["name"] == IMAGE]
    assert entry["newTag"] == project_version()
    jobs = Manifests(RENDERED).of_kind("Job")
    ours = [c["image"] for w in WORKLOADS + jobs for c in containers(w) if c["image"].split(":")[0] == IMAGE]
    # the agent, the extender, the certificates' Job and the cleanup grant's Job: one image, four commands
    assert len(ours) == 4
    assert set(ours) == {f"{IMAGE}:{project_version()}"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
def test_kubectl_kustomize_renders_the_same_objects() -> None:
    result = subprocess.run(
        ["kubectl", "kustomize", str(DAEMONSET_DIR)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    generated = {gen["name"] for gen in kustomization().get("configMapGenerator", [])}

    def key(obj: Obj) -> str:
        name = obj["metadata"]["name"]
        if obj["kind"] == "ConfigMap":
            name = re.sub(r"-[a-z0-9]{10}$", "", name)  # the content hash kustomize appends
        return object_id({**obj, "metadata": {**obj["metadata"], "name": name}})

    assert sorted(map(key, rendered)) == sorted(map(key, RENDERED))
    # The scheduler mounts the generated ConfigMap under its hashed name, which exists.
    config_maps = {obj["metadata"]["name"] for obj in rendered if obj["kind"] == "ConfigMap"}
    for obj in rendered:
        spec = pod_spec(obj)
        for volume in spec.get("volumes", []) if spec else []:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
                assert re.sub(r"-[a-z0-9]{10}$", "", volume["configMap"]["name"]) in generated


# ------------------------------------------------------------------ examples
@pytest.mark.parametrize("example", EXAMPLES, ids=object_id)
def test_examples_ask_for_a_slot_a_bitstream_and_the_fpga_scheduler(example: Obj) -> None:
    scheduler = yaml.safe_load((DAEMONSET_DIR / "scheduler-config.yaml").read_text())
    profiles = [profile["schedulerName"] for profile in scheduler["profiles"]]
    spec = pod_spec(example)
    assert spec is not None
    metadata = example["metadata"] if example["kind"] == "Pod" else example["spec"]["template"]["metadata"]
    assert metadata["annotations"]["example.com/fpga-bitstream"] == "aes-v1"
    assert spec["schedulerName"] in profiles
    for container in containers(example):
        assert container["resources"]["limits"]["example.com/fpga-slot"] == 1


def test_there_is_an_example_pod_and_deployment() -> None:
    assert sorted(obj["kind"] for obj in EXAMPLES) == ["Deployment", "Pod"]
    assert {path.name for path in EXAMPLES_DIR.glob("*.yaml")} == {"pod.yaml", "deployment.yaml"}


def test_the_host_network_overlay_changes_only_where_the_scheduler_finds_the_extender() -> None:
    """overlays/sim-hostnet has its own scheduler-config.yaml: it may differ from the shipped one in urlPrefix and
    in the name the extender's certificate is checked against (the shipped URL's host, the Service) only."""
    shipped = yaml.safe_load((DAEMONSET_DIR / "scheduler-config.yaml").read_text())
    overlay = yaml.safe_load((REPO / "overlays" / "sim-hostnet" / "scheduler-config.yaml").read_text())
    (extender,) = overlay["extenders"]
    shipped_url = urlsplit(shipped["extenders"][0]["urlPrefix"])
    assert extender["urlPrefix"] == f"https://127.0.0.1:{shipped_url.port}"
    assert extender["tlsConfig"].pop("serverName") == shipped_url.hostname
    extender["urlPrefix"] = shipped["extenders"][0]["urlPrefix"]
    assert overlay == shipped


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
def test_the_host_network_overlay_keeps_the_extender_on_the_nodes_loopback() -> None:
    """On the host network the pod's IP is the node's: the extender listens on 127.0.0.1 there instead, and the
    certificates' and the cleanup grant's Jobs, which need the API server, run on the host network as the other pods
    do."""
    rendered = yaml.safe_load_all(
        subprocess.run(
            ["kubectl", "kustomize", str(REPO / "overlays" / "sim-hostnet")],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    )  # fmt: skip
    manifests = Manifests([doc for doc in rendered if doc is not None])
    extender = manifests.get("Deployment", "fpga-slot-extender", NAMESPACE)
    (container,) = containers(extender)
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["FPGA_AGENT_LISTEN"] == "127.0.0.1:8888"
    assert env["FPGA_AGENT_PROBE_LISTEN"] == "$(POD_IP):8889"  # the kubelet probes the pod's (the node's) IP
    assert extender["spec"]["template"]["spec"]["hostNetwork"] is True
    for job in ("fpga-slot-certs", "fpga-slot-cleanup-grant"):
        assert manifests.get("Job", job, NAMESPACE)["spec"]["template"]["spec"]["hostNetwork"] is True


def test_the_sim_overlay_only_switches_the_agent_to_simulated_slots() -> None:
    kustomization = yaml.safe_load((REPO / "overlays" / "sim" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../../daemonset"]
    (patch,) = kustomization["patches"]
    assert patch["target"] == {"kind": "DaemonSet", "name": "fpga-slot-agent"}
    operations = yaml.safe_load(patch["patch"])
    assert {op["op"] for op in operations} == {"add"}
    assert {op["path"] for op in operations} == {"/spec/template/spec/containers/0/env/-"}
    env = {op["value"]["name"]: op["value"]["value"] for op in operations}
    assert env["FPGA_AGENT_BACKEND"] == "sim"
    assert all(name.startswith("FPGA_AGENT_SIM_") for name in env if name != "FPGA_AGENT_BACKEND")

"""The end-to-end suite's own parts, checked here since the suite itself needs a cluster.

Its pods are valid objects of a current Kubernetes release, and its waits (watches
through the real kubernetes client) work, against the fake API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
import yaml

import tests.e2e.cluster
from tests.e2e.cluster import (
    SLOT,
    Cluster,
    agent_pod_body,
    agent_rules,
    has_agent,
    host_pod_body,
    is_ready,
    slots_of,
    workload_pod_body,
)
from tests.e2e.deployment import REPO, fake_node_body, split_image, write_kustomization
from tests.fakeapi import FakeKubeApiServer, running_apiserver

VERSION = kubernetes_validate.latest_version()
WAIT_S = 30


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(agent_pod_body("e2e", "agent", "node-a", "fpga-slot:0.1.0", "/var/lib/e2e/x"), id="agent"),
        pytest.param(workload_pod_body("e2e", "p", "node-a", "fpga-slot:0.1.0", 1, "aes", "sleep 1"), id="workload"),
        pytest.param(workload_pod_body("e2e", "p", "node-a", "fpga-slot:0.1.0", 2, None, "sleep 1"), id="no-bitstream"),
        pytest.param(
            workload_pod_body("e2e", "p", None, "fpga-slot:0.1.0", 1, "aes", "sleep 1", "fpga-scheduler"),
            id="scheduled",
        ),
        pytest.param(host_pod_body("e2e", "h", "node-a", "fpga-slot:0.1.0", "true"), id="host"),
        pytest.param(
            host_pod_body("e2e", "h", "node-a", "fpga-slot:0.1.0", "true", host_path="/var/lib/x", host_pid=True),
            id="host-path-and-pids",
        ),
        pytest.param(fake_node_body("fake-1"), id="fake-node"),
    ],
)
def test_the_suites_pods_are_valid(body: dict[str, object]) -> None:
    kubernetes_validate.validate(body, VERSION, strict=True)


def test_test_pods_use_the_host_network_and_a_local_image() -> None:
    for body in (
        agent_pod_body("e2e", "agent", "node-a", "img", "/s"),
        workload_pod_body("e2e", "p", "node-a", "img", 1, "aes", "true"),
        host_pod_body("e2e", "h", "node-a", "img", "true"),
    ):
        spec = body["spec"]
        assert isinstance(spec, dict)
        assert spec["hostNetwork"] is True
        assert {c["imagePullPolicy"] for c in spec["containers"]} == {"IfNotPresent"}
        assert {c["image"] for c in spec["containers"]} == {"img"}


def test_the_agent_gets_the_shipped_rules_and_makes_its_own_device_node() -> None:
    # resourceslices and resourceclaims for DRA; fpgabitstreams for bitstreams pulled on demand (#14); the rest for
    # a clean one-step uninstall (#22): its DaemonSet, its ServiceAccount's finalizer (the cleanup grant is the
    # install Job's: the agent gets no RBAC objects)
    shipped = {"pods", "events", "nodes", "resourceslices", "resourceclaims", "fpgabitstreams"}
    shipped |= {"daemonsets", "serviceaccounts"}
    shipped |= {"resourceclaims/status", "resourceclaims/driver"}  # DRA: claims' device status (#45)
    assert shipped == {r for rule in agent_rules() for r in rule["resources"]}
    container = agent_pod_body("e2e", "agent", "node-a", "img", "/s")["spec"]["containers"][0]  # type: ignore[index]
    script = container["command"][2]
    assert "mknod" not in script  # the sim backend makes character devices itself, as root
    assert script.splitlines()[-1] == "exec fpga-agent run"
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert "FPGA_AGENT_SIM_DEVICE_NODES" not in {e["name"] for e in container["env"]}  # the default: char


def test_quantities_are_strings_as_the_client_requires() -> None:
    body = workload_pod_body("e2e", "p", "node-a", "img", 2, None, "true")
    (container,) = body["spec"]["containers"]  # type: ignore[index]
    assert container["resources"]["limits"] == {"example.com/fpga-slot": "2"}


def test_host_scripts_mount_what_they_need_instead_of_entering_pid_1() -> None:
    body = host_pod_body("e2e", "h", "node-a", "img", "rm -rf /host/x", host_path="/var/lib/fpga-slot-e2e")
    spec = body["spec"]
    assert isinstance(spec, dict)
    (container,) = spec["containers"]
    assert container["command"] == ["sh", "-c", "rm -rf /host/x"]
    assert "nsenter" not in str(body)
    assert spec["hostPID"] is False
    assert container["volumeMounts"] == [{"name": "host", "mountPath": "/host"}]
    assert spec["volumes"][0]["hostPath"]["path"] == "/var/lib/fpga-slot-e2e"


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        pytest.param("fpga-slot:e2e", ("fpga-slot", "e2e"), id="name-and-tag"),
        pytest.param("registry:5000/team/fpga-slot:1.2", ("registry:5000/team/fpga-slot", "1.2"), id="registry-port"),
        pytest.param("registry:5000/team/fpga-slot", ("registry:5000/team/fpga-slot", "latest"), id="no-tag"),
    ],
)
def test_the_image_under_test_replaces_the_shipped_one(tmp_path: Path, image: str, expected: tuple[str, str]) -> None:
    assert split_image(image) == expected
    write_kustomization(tmp_path, REPO / "overlays" / "sim", image)
    written = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    (resource,) = written["resources"]
    assert not Path(resource).is_absolute()
    assert (tmp_path / resource).resolve() == (REPO / "overlays" / "sim").resolve()
    assert written["images"] == [{"name": "fpga-slot", "newName": expected[0], "newTag": expected[1]}]


@pytest.mark.parametrize(
    ("node", "has"),
    [
        pytest.param({"allocatable": {}}, False, id="never-had-an-agent"),
        pytest.param({"allocatable": {"example.com/fpga-slot": "0"}}, False, id="agent-gone"),
        pytest.param({"allocatable": {"example.com/fpga-slot": "2"}}, True, id="agent-serving"),
    ],
)
def test_a_node_whose_agent_left_is_free_to_test_on(node: dict[str, Any], has: bool) -> None:
    status = SimpleNamespace(allocatable=node["allocatable"], capacity={"example.com/fpga-slot": "2"})
    assert has_agent(SimpleNamespace(status=status)) is has


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeKubeApiServer, Cluster]]:
    monkeypatch.setattr(tests.e2e.cluster, "WAIT_S", WAIT_S // 2)  # a failing wait ends before the test gives up
    with running_apiserver() as api, Cluster.connect(api.write_kubeconfig(tmp_path / "kubeconfig")) as cluster:
        yield api, cluster


def test_waits_follow_the_watch(fake: tuple[FakeKubeApiServer, Cluster]) -> None:
    api, cluster = fake
    api.add_node("node-a")
    api.add_pod("p1", phase="Pending")
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(cluster.wait_pod, "default", "p1", lambda p: p.status.phase == "Running", "Running")
        api.modify_pod("default", "p1", phase="Running")
        assert running.result(WAIT_S).metadata.name == "p1"
        gone = pool.submit(cluster.wait_pod_gone, "default", "p1")
        api.delete_pod("default", "p1")
        gone.result(WAIT_S)
    node = cluster.wait_node("node-a", lambda n: slots_of(n, "capacity") is not None, "with slots")
    assert slots_of(node, "capacity") == api.node("node-a")["status"]["capacity"]["example.com/fpga-slot"]
    api.add_pod("p2")
    assert not is_ready(cluster.core.read_namespaced_pod("p2", "default"))
    cluster.wait_pod_gone("default", "no-such-pod")  # nothing to wait for


def test_event_waits_and_reasons(fake: tuple[FakeKubeApiServer, Cluster]) -> None:
    api, cluster = fake
    api.add_pod("p1")
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(cluster.wait_event, "default", "p1", {"FpgaSlotCacheHit"})
        cluster.core.create_namespaced_event(
            "default",
            {
                "metadata": {"name": "p1.1", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
                "reason": "FpgaSlotCacheHit",
                "message": f"Slot {SLOT} already held aes",
                "type": "Normal",
                "source": {"component": "fpga-slot"},
            },
        )
        assert waiting.result(WAIT_S).message == f"Slot {SLOT} already held aes"
    assert cluster.reasons("default", "p1") == ["FpgaSlotCacheHit"]

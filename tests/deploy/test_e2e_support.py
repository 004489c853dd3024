"""The end-to-end suite's own parts, checked here since the suite itself needs a cluster.

Its pods are valid objects of a current Kubernetes release, and its waits (watches
through the real kubernetes client) work, against the fake API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kubernetes_validate
import pytest

import tests.e2e.cluster
from tests.e2e.cluster import (
    SLOT,
    Cluster,
    agent_pod_body,
    agent_rules,
    host_pod_body,
    is_ready,
    slots_of,
    workload_pod_body,
)
from tests.kubeapi import FakeKubeApiServer, running_apiserver

VERSION = kubernetes_validate.latest_version()
WAIT_S = 30


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(agent_pod_body("e2e", "agent", "node-a", "fpga-slot:0.1.0", "/var/lib/e2e/x"), id="agent"),
        pytest.param(workload_pod_body("e2e", "p", "node-a", "fpga-slot:0.1.0", 1, "aes", "sleep 1"), id="workload"),
        pytest.param(workload_pod_body("e2e", "p", "node-a", "fpga-slot:0.1.0", 2, None, "sleep 1"), id="no-bitstream"),
        pytest.param(host_pod_body("e2e", "h", "node-a", "fpga-slot:0.1.0", "true"), id="host"),
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


def test_the_agent_gets_the_shipped_rules_and_a_device_node_for_its_slot() -> None:
    assert {"pods", "events", "nodes"} == {r for rule in agent_rules() for r in rule["resources"]}
    script = agent_pod_body("e2e", "agent", "node-a", "img", "/s")["spec"]["containers"][0]["command"][2]  # type: ignore[index]
    assert f'mknod -m 0666 "/s/sim-dev/fpga-sim-{SLOT}" c 1 3' in script
    assert script.splitlines()[-1] == "exec fpga-agent run"


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

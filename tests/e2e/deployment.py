"""The shipped manifests on the cluster: ``kubectl apply -k`` of an overlay of daemonset/, as a user does it.

The overlay (``--e2e-overlay``) swaps in the sim backend (and, on a cluster without
DNS and kube-proxy, host networking); this module only points its images at the one
under test (``--e2e-image``) through a generated kustomization beside it. Everything
is removed afterwards: the objects, the node label, the fake nodes and the simulated
cards' state on the host.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from agent.deviceplugin.constants import RESOURCE_NAME
from agent.node.reconfigure import ANNOTATION as BITSTREAM_ANNOTATION
from agent.simfpga.fabric import PLATFORM
from tests.e2e.cluster import (
    ACCELERATOR,
    BITSTREAM,
    FAKE_NODE_LABEL,
    REPO,
    WAIT_S,
    Cluster,
    Obj,
    Suite,
    has_agent,
    is_ready,
    pick_node,
)
from tests.e2e.schedulerclient import SchedulerClient

NAMESPACE = "fpga-slot"
AGENT = "fpga-slot-agent"
SCHEDULER = "fpga-scheduler"
EXTENDER = "fpga-slot-extender"
#: The label that puts the agent DaemonSet on a node.
FPGA_NODE_LABEL = "example.com/fpga"
#: The agent's state directory on the host (the DaemonSet's hostPath).
STATE_DIR = "/var/lib/fpga-agent"
#: The extender's plain-HTTP port of /healthz and /metrics (its scheduler port takes HTTPS with the
#: scheduler's certificate only: tests.e2e.schedulerclient calls that one).
EXTENDER_PROBE_PORT = 8889
#: Slots per node in the sim overlays.
SLOTS = 2


def fpga_agent_uninstall() -> subprocess.CompletedProcess[str]:
    """``fpga-agent uninstall`` as an operator runs it, with the suite's KUBECONFIG."""
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "uninstall"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def kubectl(*args: str) -> str:
    done = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def split_image(image: str) -> tuple[str, str]:
    """``registry:5000/repo/name:tag`` -> (``registry:5000/repo/name``, ``tag``); no tag means ``latest``."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, "latest"
    return name, tag


def write_kustomization(directory: Path, overlay: Path, image: str, components: tuple[Path, ...] = ()) -> None:
    """A kustomization of ``overlay`` (with ``components``) with the project's image replaced by ``image``."""
    name, tag = split_image(image)
    kustomization: dict[str, object] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, directory)],  # kustomize refuses absolute paths
        "images": [{"name": "fpga-slot", "newName": name, "newTag": tag}],
    }
    if components:
        kustomization["components"] = [os.path.relpath(c, directory) for c in components]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))


@dataclass
class Deployment:
    """fpga-slot as deployed from daemonset/ on the node of ``suite`` (whose namespace holds the test pods)."""

    suite: Suite
    #: The generated kustomization applied (``kubectl delete -k`` of it uninstalls as a user does)
    kustomization: Path

    @property
    def cluster(self) -> Cluster:
        return self.suite.cluster

    def agent_pod(self) -> Obj:
        """The agent pod serving the node now (not one on its way out)."""
        pods = self.cluster.core.list_namespaced_pod(
            NAMESPACE,
            label_selector="app.kubernetes.io/component=agent",
            field_selector=f"spec.nodeName={self.suite.node}",
        ).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        assert len(live) == 1, [p.metadata.name for p in pods]
        return live[0]

    def wait_rolled_out(self) -> Obj:
        """Wait until the DaemonSet's current template runs Ready on every node it selects; the node's agent pod.
        When it does not, the failure shows the agent pods' state, Events and log tails."""
        try:
            self._wait_daemon_set()
        except AssertionError as exc:
            raise AssertionError(f"{str(exc)[:2000]}\n{self.agent_diagnosis()}") from None
        pod = self.agent_pod()
        self.suite.agent_pod = pod.metadata.name
        return pod

    def agent_diagnosis(self) -> str:
        """The node's agent pods: phase, container state, Events and the end of each log."""
        lines = []
        pods = self.cluster.core.list_namespaced_pod(
            NAMESPACE,
            label_selector="app.kubernetes.io/component=agent",
            field_selector=f"spec.nodeName={self.suite.node}",
        ).items
        for pod in pods:
            name = pod.metadata.name
            lines.append(f"--- agent pod {name}: {pod.status.phase}, {pod.status.container_statuses}")
            events = self.cluster.core.list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={name}")
            lines += [f"event {e.reason}: {e.message}" for e in events.items]
            with contextlib.suppress(ApiException):
                lines += self.cluster.logs(NAMESPACE, name).splitlines()[-40:]
        return "\n".join(lines)

    def _wait_daemon_set(self) -> None:
        self.cluster.wait_daemon_set(
            NAMESPACE,
            AGENT,
            lambda ds: (
                (ds.status.observed_generation or 0) >= ds.metadata.generation
                and ds.status.desired_number_scheduled >= 1
                and ds.status.updated_number_scheduled == ds.status.desired_number_scheduled
                and ds.status.number_ready == ds.status.desired_number_scheduled
                and not ds.status.number_unavailable
            ),
            "rolled out and Ready",
        )

    def wait_available(self, name: str) -> Obj:
        return self.cluster.wait_deployment(
            NAMESPACE,
            name,
            lambda d: (
                (d.status.observed_generation or 0) >= d.metadata.generation
                and (d.status.updated_replicas or 0) == d.spec.replicas
                and (d.status.available_replicas or 0) == d.spec.replicas
            ),
            "available",
        )

    def add_to_catalog(self) -> None:
        """Put the test bitstream into the node's catalog through its agent pod, as docs/operations.md says to."""
        kubectl(
            "exec",
            "-n",
            NAMESPACE,
            self.suite.agent_pod,
            "-c",
            "agent",
            "--",
            "sh",
            "-c",
            "head -c 65536 /dev/urandom > /tmp/e2e.bin && "
            f"fpga-agent catalog add /tmp/e2e.bin --name {BITSTREAM} --platform {PLATFORM} "
            f"--accelerator-id {ACCELERATOR} --replace && rm /tmp/e2e.bin",
        )

    def _extender_pod(self) -> Obj:
        (pod,) = self.cluster.core.list_namespaced_pod(
            NAMESPACE, label_selector="app.kubernetes.io/component=extender"
        ).items
        return pod

    def extender_calls(self, verb: str) -> float:
        """Requests the extender answered for ``verb`` (its /metrics on the probe port, read through the API
        server's pod proxy)."""
        pod = self._extender_pod()
        text: str = self.cluster.core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod.metadata.name}:{EXTENDER_PROBE_PORT}", NAMESPACE, "metrics"
        )
        pattern = rf'^fpga_slot_extender_requests_total\{{[^}}]*verb="{verb}"[^}}]*\}} (\S+)$'
        return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))

    def wait_extender_prefers(self, node: str, others: list[str], bitstream: str) -> None:
        """Until the extender, asked as the scheduler asks it (HTTPS, its client certificate), scores ``node``
        above ``others``.

        The node's catalog reaches the extender through the agent's Node annotation and the
        extender's watch, a moment after the catalog changed; a pod created before that is
        scored as if the node could not program its bitstream.
        """
        result = SchedulerClient(self.cluster, self.suite.image).wait_prefers(probe_body(bitstream, [node, *others]),
                                                                              node, others)  # fmt: skip
        assert result["preferred"], f"the extender never scored {node} above {others} for {bitstream}: {result}"

    @contextlib.contextmanager
    def fake_nodes(self, count: int) -> Iterator[list[str]]:
        """Node objects without a kubelet, one free slot each, for the scheduler to choose among."""
        names = [f"fpga-slot-e2e-fake-{secrets.token_hex(3)}" for _ in range(count)]
        try:
            for name in names:
                self.cluster.core.create_node(fake_node_body(name))
            yield names
        finally:
            for name in names:
                with contextlib.suppress(ApiException):
                    self.cluster.core.delete_node(name)


def probe_body(bitstream: str, nodes: list[str]) -> dict[str, object]:
    """A prioritize request as kube-scheduler sends it: a pod asking for one slot and ``bitstream``."""
    return {
        "Pod": {
            "metadata": {"name": "e2e-probe", "namespace": NAMESPACE, "annotations": {BITSTREAM_ANNOTATION: bitstream}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {RESOURCE_NAME: "1"}}}]},
        },
        "NodeNames": nodes,
    }


def fake_node_body(name: str) -> dict[str, object]:
    """A Ready node with one free fpga-slot and no published slot state (the extender scores it neutral)."""
    capacity = {"cpu": "4", "memory": "16Gi", "pods": "110", RESOURCE_NAME: "1"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {FAKE_NODE_LABEL: "true", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "FpgaSlotE2E", "message": "no kubelet"}],
        },
    }


@contextlib.contextmanager
def deploy(
    cluster: Cluster,
    *,
    image: str,
    node: str,
    overlay: Path,
    kubelet_restart: str,
    components: tuple[Path, ...] = (),
    host_setup: str = "",
) -> Iterator[Deployment]:
    """``kubectl apply -k`` the overlay (with ``components``, such as DRA mode) with the image under test; the
    agent Ready on ``node``; all removed after. ``host_setup`` runs on the node (its / at /host) before the agent
    starts and after it has gone, given ``setup`` or ``cleanup`` as its first argument."""
    node = pick_node(cluster, node)
    namespace = f"fpga-slot-e2e-deploy-{secrets.token_hex(3)}"
    cluster.core.create_namespace({"metadata": {"name": namespace, "labels": {"app.kubernetes.io/name": "fpga-slot"}}})
    suite = Suite(cluster, namespace, node, image, NAMESPACE, "", kubelet_restart)
    # The simulated cards' contents and the checkpoint of an earlier run would make programming a cache hit.
    forget_state = "rm -rf /host/sim-dev /host/checkpoint.json /host/dra-claims.json"
    with tempfile.TemporaryDirectory(prefix="fpga-slot-e2e-") as tmp:
        try:
            suite.run_on_host("forget-state", forget_state, host_path=STATE_DIR)
            if host_setup:
                suite.run_on_host("host-setup", f"set -- setup; {host_setup}", host_path="/")
            cluster.core.patch_node(node, {"metadata": {"labels": {FPGA_NODE_LABEL: "true"}}})
            write_kustomization(Path(tmp), REPO / overlay, image, components)
            kubectl("apply", "-k", tmp)
            deployment = Deployment(suite, Path(tmp))
            pod = deployment.wait_rolled_out()
            assert is_ready(pod)
            deployment.add_to_catalog()
            yield deployment
        finally:
            try:
                try:
                    kubectl("delete", "-k", tmp, "--ignore-not-found", "--wait=true", f"--timeout={WAIT_S}s")
                except AssertionError:
                    # An agent that did not stop cleanly keeps the namespace (docs/uninstall.md): finish as an
                    # operator would, so that the next test can install, and still fail this one.
                    fpga_agent_uninstall()
                    kubectl("delete", "-k", tmp, "--ignore-not-found", "--wait=true", f"--timeout={WAIT_S}s")
                    raise
                # The agent removed its socket on SIGTERM: the kubelet stops offering the node's slots.
                cluster.wait_node(node, lambda n: not has_agent(n), "with no allocatable slot once the agent left")
            finally:
                cluster.core.patch_node(node, {"metadata": {"labels": {FPGA_NODE_LABEL: None}}})
                suite.run_on_host("forget-state-after", forget_state, host_path=STATE_DIR)
                if host_setup:
                    suite.run_on_host("host-cleanup", f"set -- cleanup; {host_setup}", host_path="/")
                with contextlib.suppress(ApiException):
                    cluster.core.delete_namespace(namespace)


def dra_components(pytestconfig: Any) -> tuple[Path, ...]:
    """DRA mode's components for the overlay under test: daemonset/dra-mode, and on an overlay that calls the
    extender at 127.0.0.1 (no cluster DNS: overlays/sim-hostnet) the loopback scheduler configuration of
    overlays/sim-dra, so that the fpga-scheduler reaches the extender in DRA mode too."""
    components: tuple[Path, ...] = (REPO / "daemonset" / "dra-mode",)
    if Path(pytestconfig.getoption("--e2e-overlay")).name == "sim-hostnet":
        components += (REPO / "overlays" / "sim-dra" / "loopback-extender",)
    return components


@contextlib.contextmanager
def deploy_as_configured(
    cluster: Cluster, pytestconfig: Any, components: tuple[Path, ...] = ()
) -> Iterator[Deployment]:
    """:func:`deploy` with the image, node, overlay and kubelet restart of the command line (``--e2e-*``)."""
    with deploy(
        cluster,
        image=pytestconfig.getoption("--e2e-image"),
        node=pytestconfig.getoption("--e2e-node"),
        overlay=Path(pytestconfig.getoption("--e2e-overlay")),
        kubelet_restart=pytestconfig.getoption("--e2e-kubelet-restart"),
        components=components,
    ) as deployed:
        yield deployed

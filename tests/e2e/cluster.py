"""The cluster as the end-to-end tests use it: objects they create, and waiting for what they expect.

Waiting is done with watches (the API server reports each change), never by sleeping;
every wait has a deadline and fails with what it saw last.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from agent.deviceplugin import RESOURCE_NAME
from agent.reconfigure import ANNOTATION
from agent.simfpga.fabric import PLATFORM
from agent.slots import make_slot_id

REPO = Path(__file__).parents[2]
WAIT_S = 180
#: The simulated node: one card with one slot, so every test knows which slot a pod gets.
SLOT = make_slot_id("simcard0", "slot0")
BITSTREAM = "e2e-aes"
ACCELERATOR = "e2e0000000000000000000000000a5e1"
HEALTH_PORT = 8095
#: What the agent logs each time the kubelet accepted its registration.
REGISTERED = f"registered {RESOURCE_NAME} with the kubelet"
#: Everything the suite leaves on the node's disk lives below this directory (removed at the end).
HOST_DIR = "/var/lib/fpga-slot-e2e"

Obj = Any  # a kubernetes client model object


@dataclass
class Cluster:
    api: client.ApiClient
    core: client.CoreV1Api
    rbac: client.RbacAuthorizationV1Api

    @classmethod
    @contextlib.contextmanager
    def connect(cls, kubeconfig: Path) -> Iterator[Cluster]:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        try:
            yield cls(api, client.CoreV1Api(api), client.RbacAuthorizationV1Api(api))
        finally:
            api.close()

    # ------------------------------------------------------------------ waiting
    def wait_pod(self, namespace: str, name: str, done: Callable[[Obj], bool], what: str) -> Obj:
        return _wait(
            self.core.list_namespaced_pod, (namespace,), f"metadata.name={name}", done, f"pod {namespace}/{name} {what}"
        )

    def wait_node(self, name: str, done: Callable[[Obj], bool], what: str) -> Obj:
        return _wait(self.core.list_node, (), f"metadata.name={name}", done, f"node {name} {what}")

    def wait_pod_gone(self, namespace: str, name: str) -> None:
        selector = f"metadata.name={name}"
        listing = self.core.list_namespaced_pod(namespace, field_selector=selector)
        if not listing.items:
            return
        stream = watch.Watch()
        try:
            for event in stream.stream(
                self.core.list_namespaced_pod,
                namespace,
                field_selector=selector,
                resource_version=listing.metadata.resource_version,  # from the listing on: no deletion missed
                timeout_seconds=WAIT_S,
            ):
                if event["type"] == "DELETED":
                    return
        finally:
            stream.stop()
        raise AssertionError(f"pod {namespace}/{name} still there after {WAIT_S} s")

    def wait_event(self, namespace: str, pod: str, reasons: set[str]) -> Obj:
        """The first Event on ``pod`` with one of ``reasons`` (already posted or yet to come)."""
        return _wait(
            self.core.list_namespaced_event,
            (namespace,),
            f"involvedObject.kind=Pod,involvedObject.name={pod}",
            lambda event: event.reason in reasons,
            f"Event {sorted(reasons)} on pod {namespace}/{pod}",
        )

    def reasons(self, namespace: str, pod: str) -> list[str]:
        events = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
        return [event.reason for event in events]

    def wait_log(self, namespace: str, pod: str, done: Callable[[str], bool], what: str) -> str:
        """Follow the pod's log (from its start) until ``done(text so far)``."""
        response = self.core.read_namespaced_pod_log(
            pod, namespace, follow=True, _preload_content=False, _request_timeout=WAIT_S
        )
        text = ""
        try:
            for chunk in response.stream(4096):
                text += chunk.decode(errors="replace")
                if done(text):
                    return text
        except Exception as exc:  # the read timed out, or the connection dropped
            raise AssertionError(f"log of pod {namespace}/{pod}: {what} not seen ({exc}):\n{text[-2000:]}") from exc
        finally:
            response.release_conn()
        raise AssertionError(f"log of pod {namespace}/{pod} ended before {what}:\n{text[-2000:]}")

    def logs(self, namespace: str, pod: str) -> str:
        text: str = self.core.read_namespaced_pod_log(pod, namespace)
        return text


def _wait(
    list_func: Callable[..., Any], args: tuple[str, ...], selector: str, done: Callable[[Obj], bool], what: str
) -> Obj:
    """Watch the objects ``list_func`` selects (existing ones first) until one is ``done``.

    ``list_func`` is a client method itself: the watch reads the type to decode from its docstring.
    """
    last: Obj = None
    stream = watch.Watch()
    try:
        for event in stream.stream(list_func, *args, field_selector=selector, timeout_seconds=WAIT_S):
            if event["type"] == "DELETED":
                continue
            last = event["object"]
            if done(last):
                return last
    finally:
        stream.stop()
    raise AssertionError(f"{what}: not within {WAIT_S} s; last seen:\n{last}")


def slots_of(node: Obj, field: str) -> str | None:
    values = getattr(node.status, field) or {}
    value: str | None = values.get(RESOURCE_NAME)
    return value


def is_ready(pod: Obj) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def node_is_ready(node: Obj) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


# ------------------------------------------------------------------------ pods
@dataclass
class Suite:
    cluster: Cluster
    namespace: str
    node: str
    image: str
    agent_pod: str

    def pod(self, name: str, *, slots: int, bitstream: str | None = None, command: str = "sleep 3600") -> Obj:
        """A host-network pod on the node under test asking for ``slots`` slots (and a bitstream)."""
        body = workload_pod_body(self.namespace, name, self.node_hostname, self.image, slots, bitstream, command)
        return self.cluster.core.create_namespaced_pod(self.namespace, body)

    @property
    def node_hostname(self) -> str:
        node = self.cluster.core.read_node(self.node)
        hostname: str = node.metadata.labels.get("kubernetes.io/hostname", self.node)
        return hostname

    def delete_pod(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.cluster.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        self.cluster.wait_pod_gone(self.namespace, name)

    def registrations(self, log: str | None = None) -> int:
        """How often the agent has registered with the kubelet (from its log)."""
        text = self.cluster.logs(self.namespace, self.agent_pod) if log is None else log
        return text.count(REGISTERED)

    def wait_registrations(self, count: int) -> None:
        self.cluster.wait_log(
            self.namespace, self.agent_pod, lambda log: self.registrations(log) >= count, f"registration {count}"
        )

    def run_on_host(self, name: str, script: str) -> Obj:
        """Run ``script`` in the host's namespaces (privileged, host PID); the finished pod."""
        body = host_pod_body(self.namespace, name, self.node, self.image, script)
        self.cluster.core.create_namespaced_pod(self.namespace, body)
        return self.cluster.wait_pod(
            self.namespace, name, lambda p: p.status.phase in ("Succeeded", "Failed"), "finished"
        )


def workload_pod_body(
    namespace: str, name: str, hostname: str, image: str, slots: int, bitstream: str | None, command: str
) -> dict[str, Any]:
    """A host-network pod for the node ``hostname`` asking for ``slots`` slots (and a bitstream)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {ANNOTATION: bitstream} if bitstream else {},
        },
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": hostname},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                    "resources": {"limits": {RESOURCE_NAME: slots}},
                }
            ],
        },
    }


def host_pod_body(namespace: str, name: str, node: str, image: str, script: str) -> dict[str, Any]:
    """A pod running ``script`` in the host's namespaces (privileged, host PID) on ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "hostNetwork": True,
            "hostPID": True,
            "restartPolicy": "Never",
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "host",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "sh", "-c", script],
                    "securityContext": {"privileged": True, "runAsUser": 0},
                }
            ],
        },
    }


def pick_node(cluster: Cluster, wanted: str) -> str:
    """The node to test on: the one asked for, else the first Ready, schedulable Linux node."""
    nodes = cluster.core.list_node().items
    if wanted:
        (node,) = [n for n in nodes if n.metadata.name == wanted] or [None]
        if node is None:
            raise AssertionError(f"--e2e-node {wanted}: no such node")
    else:
        candidates = [
            n
            for n in nodes
            if node_is_ready(n)
            and not n.spec.unschedulable
            and n.metadata.labels.get("kubernetes.io/os") == "linux"
            and not slots_of(n, "capacity")
        ]
        if not candidates:
            raise AssertionError("no Ready, schedulable Linux node without an fpga-slot agent to test on")
        node = candidates[0]
    if slots_of(node, "capacity"):
        pytest.skip(f"node {node.metadata.name} already has {RESOURCE_NAME} (an agent runs there): left alone")
    name: str = node.metadata.name
    return name


def agent_rules() -> list[Obj]:
    """The agent's ClusterRole rules as daemonset/ ships them (so the suite also tests the RBAC)."""
    for doc in yaml.safe_load_all((REPO / "daemonset" / "agent-rbac.yaml").read_text()):
        if doc and doc["kind"] == "ClusterRole":
            rules: list[Obj] = doc["rules"]
            return rules
    raise AssertionError("daemonset/agent-rbac.yaml has no ClusterRole")


def agent_pod_body(namespace: str, name: str, node: str, image: str, state: str) -> dict[str, Any]:
    """The agent on simulated slots, as a host-network pod with the kubelet's directories mounted.

    The simulated slot's device file is made a character device (the numbers of
    /dev/null) before the agent starts, so the container runtime can hand it to a
    container as it would a real slot's device node.
    """
    device = f"{state}/sim-dev/fpga-sim-{SLOT}"
    script = "\n".join(
        [
            "set -e",
            f'mkdir -p "{state}/sim-dev"',
            f'[ -e "{device}" ] || mknod -m 0666 "{device}" c 1 3',
            "head -c 65536 /dev/urandom > /tmp/e2e.bin",
            f"fpga-agent catalog add /tmp/e2e.bin --name {BITSTREAM} --platform {PLATFORM}"
            f" --accelerator-id {ACCELERATOR} --replace",
            "exec fpga-agent run",
        ]
    )
    env = {
        "FPGA_AGENT_BACKEND": "sim",
        "FPGA_AGENT_SIM_CARDS": "1",
        "FPGA_AGENT_SIM_SLOTS_PER_CARD": "1",
        "FPGA_AGENT_SIM_PROGRAM_MS": "300",
        "FPGA_AGENT_STATE_DIR": state,
        "FPGA_AGENT_BITSTREAM_DIR": f"{state}/bitstreams",
        "FPGA_AGENT_HEALTH_LISTEN": f"0.0.0.0:{HEALTH_PORT}",
    }
    host_paths = {
        "device-plugins": ("/var/lib/kubelet/device-plugins", False),
        "pod-resources": ("/var/lib/kubelet/pod-resources", True),
        "state": (HOST_DIR, False),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": name,
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "agent",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "env": [{"name": k, "value": v} for k, v in env.items()]
                    + [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "ports": [{"name": "health", "containerPort": HEALTH_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 2},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"}, "periodSeconds": 10},
                    "securityContext": {"privileged": True, "runAsUser": 0},
                    "volumeMounts": [
                        {"name": vol, "mountPath": path, "readOnly": ro} for vol, (path, ro) in host_paths.items()
                    ],
                }
            ],
            "volumes": [
                {
                    "name": vol,
                    "hostPath": {"path": path, "type": "DirectoryOrCreate" if vol == "state" else "Directory"},
                }
                for vol, (path, _) in host_paths.items()
            ],
        },
    }


@contextlib.contextmanager
def start_suite(cluster: Cluster, *, image: str, node: str) -> Iterator[Suite]:
    node = pick_node(cluster, node)
    suffix = secrets.token_hex(3)
    namespace = name = f"fpga-slot-e2e-{suffix}"
    state = f"{HOST_DIR}/{suffix}"
    cluster.core.create_namespace({"metadata": {"name": namespace, "labels": {"app.kubernetes.io/name": "fpga-slot"}}})
    try:
        cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        cluster.rbac.create_cluster_role({"metadata": {"name": name}, "rules": agent_rules()})
        cluster.rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            }
        )
        cluster.core.create_namespaced_pod(namespace, agent_pod_body(namespace, name, node, image, state))
        suite = Suite(cluster, namespace, node, image, name)
        try:
            cluster.wait_pod(namespace, name, is_ready, "Ready (registered with the kubelet)")
            yield suite
        finally:
            suite.delete_pod(name)  # SIGTERM: the agent removes its socket; the kubelet drops the resource
            cleanup = suite.run_on_host(f"cleanup-{suffix}", f'rm -rf "{state}"')
            assert cleanup.status.phase == "Succeeded", cleanup.status
    finally:
        with contextlib.suppress(ApiException):
            cluster.rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(ApiException):
            cluster.rbac.delete_cluster_role(name)
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespace(namespace)

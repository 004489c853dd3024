"""The cluster as the end-to-end tests use it: objects they create, and waiting for what they expect.

Waiting on API objects is done with watches (the API server reports each change), never by
sleeping; every wait has a deadline and fails with what it saw last. What no watch of these
reports (the test's own plugin, a slice read through a typed client) is polled by :func:`wait_for`.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from agent.deviceplugin.constants import RESOURCE_NAME
from agent.node.reconfigure import ANNOTATION
from agent.simfpga.fabric import PLATFORM
from agent.slots.model import make_slot_id
from agent.slots.published import GROUP, PLURAL, VERSION, NodeState, PublishedSlot, parse_state

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
#: Label of the Node objects without a kubelet that the suite adds (for the scheduler to choose among).
FAKE_NODE_LABEL = "fpga-slot-e2e/fake"
#: The CRD of the objects the agents publish their slot state in.
NODE_STATE_CRD = REPO / "daemonset" / "fpganodestate-crd.yaml"
#: The agent's Role for its FpgaNodeState (daemonset/agent-rbac.yaml).
NODE_STATE_ROLE = "fpga-slot-agent-node-state"

Obj = Any  # a kubernetes client model object


@dataclass
class Cluster:
    api: client.ApiClient
    core: client.CoreV1Api
    rbac: client.RbacAuthorizationV1Api
    apps: client.AppsV1Api

    @classmethod
    @contextlib.contextmanager
    def connect(cls, kubeconfig: Path) -> Iterator[Cluster]:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        try:
            yield cls(api, client.CoreV1Api(api), client.RbacAuthorizationV1Api(api), client.AppsV1Api(api))
        finally:
            api.close()

    def node_state(self, namespace: str, node: str) -> list[PublishedSlot] | None:
        """The slots ``node``'s FpgaNodeState in ``namespace`` publishes; None when it has none."""
        state = self._published(namespace, node)
        return None if state is None else list(state.slots)

    def node_catalog(self, namespace: str, node: str) -> dict[str, str]:
        """The catalog (bitstream -> platform) ``node``'s FpgaNodeState publishes; empty when it has none."""
        state = self._published(namespace, node)
        return {} if state is None else dict(state.bitstreams)

    def _published(self, namespace: str, node: str) -> NodeState | None:
        try:
            obj = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, node
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return parse_state(obj)

    def install_node_state_crd(self) -> None:
        """The FpgaNodeState CRD as daemonset/ ships it, when the cluster lacks it; waits until it is served."""
        extensions = client.ApiextensionsV1Api(self.api)
        body = yaml.safe_load(NODE_STATE_CRD.read_text())
        with contextlib.suppress(ApiException):
            extensions.create_custom_resource_definition(body)

        def established() -> bool:
            crd = extensions.read_custom_resource_definition(body["metadata"]["name"])
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for("the FpgaNodeState CRD established", lambda: established() or None)

    # ------------------------------------------------------------------ waiting
    def wait_pod(self, namespace: str, name: str, done: Callable[[Obj], bool], what: str) -> Obj:
        return _wait(
            self.core.list_namespaced_pod, (namespace,), f"metadata.name={name}", done, f"pod {namespace}/{name} {what}"
        )

    def wait_daemon_set(self, namespace: str, name: str, done: Callable[[Obj], bool], what: str) -> Obj:
        return _wait(
            self.apps.list_namespaced_daemon_set,
            (namespace,),
            f"metadata.name={name}",
            done,
            f"DaemonSet {namespace}/{name} {what}",
        )

    def wait_deployment(self, namespace: str, name: str, done: Callable[[Obj], bool], what: str) -> Obj:
        return _wait(
            self.apps.list_namespaced_deployment,
            (namespace,),
            f"metadata.name={name}",
            done,
            f"Deployment {namespace}/{name} {what}",
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

    def wait_event(self, namespace: str, pod: str, reasons: set[str], saying: str = "") -> Obj:
        """The first Event on ``pod`` with one of ``reasons`` (and ``saying`` in its message), already posted or
        yet to come."""
        return _wait(
            self.core.list_namespaced_event,
            (namespace,),
            f"involvedObject.kind=Pod,involvedObject.name={pod}",
            lambda event: event.reason in reasons and saying in (event.message or ""),
            f"Event {sorted(reasons)} saying {saying!r} on pod {namespace}/{pod}",
        )

    def reasons(self, namespace: str, pod: str) -> list[str]:
        events = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
        return [event.reason for event in events]

    def wait_log(self, namespace: str, pod: str, done: Callable[[str], bool], what: str) -> str:
        """Follow the pod's log (from its start) until ``done(text so far)``.

        The kubelet serves logs: while it restarts, the follow fails or ends; it is opened again
        (reading from the start) until the deadline.
        """
        deadline = time.monotonic() + WAIT_S
        text, problem = "", "no log read"
        while time.monotonic() < deadline:
            text = ""
            try:
                response = self.core.read_namespaced_pod_log(
                    pod, namespace, follow=True, _preload_content=False, _request_timeout=deadline - time.monotonic()
                )
                try:
                    for chunk in response.stream(4096):
                        text += chunk.decode(errors="replace")
                        if done(text):
                            return text
                finally:
                    response.release_conn()
                problem = "the log ended"
            except Exception as exc:  # the kubelet is away, the read timed out, the connection dropped
                problem = str(exc).splitlines()[0]
            time.sleep(1)
        raise AssertionError(f"log of pod {namespace}/{pod}: {what} not seen ({problem}):\n{text[-2000:]}")

    def logs(self, namespace: str, pod: str) -> str:
        text: str = self.core.read_namespaced_pod_log(pod, namespace)
        return text


class NodeWrites:
    """Watches one Node while in use and records each change of its labels or annotations (who wrote it)."""

    def __init__(self, cluster: Cluster, node: str) -> None:
        self._cluster = cluster
        self._node = node
        self._changes: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"node-writes-{node}", daemon=True)
        self._ready = threading.Event()

    def __enter__(self) -> NodeWrites:
        self._thread.start()
        self._ready.wait(WAIT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)

    def metadata_changes(self) -> list[str]:
        return list(self._changes)

    def _follow(self) -> None:
        node = self._cluster.core.read_node(self._node)
        version, last = node.metadata.resource_version, _metadata_keys(node)
        self._ready.set()
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self._cluster.core.list_node,
                    field_selector=f"metadata.name={self._node}",
                    resource_version=version,
                    timeout_seconds=5,
                ):
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    keys = _metadata_keys(obj)
                    if keys != last:
                        managers = sorted({entry.manager for entry in obj.metadata.managed_fields or []})
                        self._changes.append(f"{sorted(set(keys.items()) ^ set(last.items()))} ({managers})")
                        last = keys
                    if self._stop.is_set():
                        break
            finally:
                stream.stop()


def _metadata_keys(node: Obj) -> dict[str, str]:
    return {
        **(node.metadata.labels or {}),
        **{f"annotation:{k}": v for k, v in (node.metadata.annotations or {}).items()},
    }


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


#: How often :func:`wait_for` looks again.
POLL_S = 0.2
#: How long a node whose agent just stopped may still show its slots as allocatable.
FREED_NODE_WAIT_S = 60


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    """Poll ``check`` until it gives something true, and return that; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(POLL_S)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


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
    """The node under test, the namespace the tests' pods go to, and the agent serving the node."""

    cluster: Cluster
    namespace: str
    node: str
    image: str
    agent_namespace: str
    agent_pod: str
    kubelet_restart: str

    def pod(
        self,
        name: str,
        *,
        slots: int,
        bitstream: str | None = None,
        command: str = "sleep 3600",
        scheduler: str | None = None,
    ) -> Obj:
        """A pod asking for ``slots`` slots (and a bitstream): on the node under test, or left to ``scheduler``."""
        hostname = None if scheduler else self.node_hostname
        body = workload_pod_body(self.namespace, name, hostname, self.image, slots, bitstream, command, scheduler)
        return self.cluster.core.create_namespaced_pod(self.namespace, body)

    def running_pod(self, name: str, **kwargs: Any) -> Obj:
        """:meth:`pod`, then wait until it runs; the running pod."""
        self.pod(name, **kwargs)
        return self.cluster.wait_pod(self.namespace, name, running, "Running")

    @property
    def node_hostname(self) -> str:
        node = self.cluster.core.read_node(self.node)
        hostname: str = node.metadata.labels.get("kubernetes.io/hostname", self.node)
        return hostname

    def delete_pod(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.cluster.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        self.cluster.wait_pod_gone(self.namespace, name)

    def slots_of_pod(self, name: str) -> str:
        """The slots a pod was given, as its container printed them (``FPGA_SLOTS=...``)."""
        log = self.cluster.wait_log(self.namespace, name, lambda text: "FPGA_SLOTS=" in text, "FPGA_SLOTS")
        (line,) = [line for line in log.splitlines() if line.startswith("FPGA_SLOTS=")]
        return line.removeprefix("FPGA_SLOTS=")

    def registrations(self, log: str | None = None) -> int:
        """How often the agent has registered with the kubelet (from its log)."""
        text = self.cluster.logs(self.agent_namespace, self.agent_pod) if log is None else log
        return text.count(REGISTERED)

    def wait_registrations(self, count: int) -> None:
        self.cluster.wait_log(
            self.agent_namespace, self.agent_pod, lambda log: self.registrations(log) >= count, f"registration {count}"
        )

    def run_on_host(self, name: str, script: str, *, host_path: str | None = None, host_pid: bool = False) -> Obj:
        """Run ``script`` on the node (``host_path`` mounted at /host, the host's PIDs if asked); the finished pod."""
        body = host_pod_body(
            self.namespace, name, self.node, self.image, script, host_path=host_path, host_pid=host_pid
        )
        self.cluster.core.create_namespaced_pod(self.namespace, body)
        finished = self.cluster.wait_pod(
            self.namespace, name, lambda p: p.status.phase in ("Succeeded", "Failed"), "finished"
        )
        log = self.cluster.logs(self.namespace, name)
        self.delete_pod(name)
        assert finished.status.phase == "Succeeded", f"host script {name} failed:\n{log}"
        return finished

    def forget_device_plugin(self) -> None:
        """Make the node's kubelet forget a device plugin's resource that earlier tests registered here.

        The kubelet keeps a device plugin's resources in its checkpoint; one restored from it after a
        restart stays in its device manager, which then claims a pod asking for the resource before the
        DRA driver behind the DeviceClass's extended resource name can (CreateContainerConfigError:
        endpoint not found in cache for a registered resource). As docs/dra.md tells operators moving a
        node to DRA mode: remove the checkpoint and restart the kubelet.
        """
        if RESOURCE_NAME not in (self.cluster.core.read_node(self.node).status.capacity or {}):
            return
        self.run_on_host("forget-device-plugin", "rm -f /host/kubelet_internal_checkpoint", host_path=DEVICE_PLUGINS)
        self.restart_kubelet()

    def restart_kubelet(self) -> None:
        """Restart the node's kubelet with the configured command (``--e2e-kubelet-restart``), run here."""
        done = subprocess.run(  # the command line is the operator's, given as one shell string
            self.kubelet_restart, shell=True, capture_output=True, text=True, timeout=WAIT_S, check=False
        )
        assert done.returncode == 0, f"kubelet restart `{self.kubelet_restart}` failed:\n{done.stdout}{done.stderr}"


#: The kubelet's device-plugin directory (its checkpoint of registered resources).
DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"


def running(pod: Obj) -> bool:
    return getattr(getattr(pod, "status", None), "phase", None) == "Running" and is_ready(pod)


def restarts(pod: Obj) -> int:
    return sum(status.restart_count for status in pod.status.container_statuses or [])


def workload_pod_body(
    namespace: str,
    name: str,
    hostname: str | None,
    image: str,
    slots: int,
    bitstream: str | None,
    command: str,
    scheduler: str | None = None,
) -> dict[str, Any]:
    """A host-network pod asking for ``slots`` slots (and a bitstream), on ``hostname`` or where ``scheduler`` says."""
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", command],
                # Quantities are strings: the client refuses an int before anything is sent.
                "resources": {"limits": {RESOURCE_NAME: str(slots)}},
            }
        ],
    }
    if hostname is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": hostname}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {ANNOTATION: bitstream} if bitstream else {},
        },
        "spec": spec,
    }


def host_pod_body(
    namespace: str,
    name: str,
    node: str,
    image: str,
    script: str,
    *,
    host_path: str | None = None,
    host_pid: bool = False,
) -> dict[str, Any]:
    """A privileged pod on ``node`` running ``script``, with ``host_path`` at /host and the host's PIDs if asked.

    No nsenter into PID 1: that is refused on some nodes; what a script needs of the host is mounted.
    """
    container: dict[str, Any] = {
        "name": "host",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "securityContext": {"privileged": True, "runAsUser": 0},
    }
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "hostPID": host_pid,
        "restartPolicy": "Never",
        "nodeName": node,
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
    }
    if host_path is not None:
        container["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
        spec["volumes"] = [{"name": "host", "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def has_agent(node: Obj) -> bool:
    """An agent serves the node: it has fpga-slot capacity that is allocatable.

    A node whose agent went away keeps the capacity with 0 allocatable for minutes
    (the kubelet's grace period); that is free to test on again.
    """
    return slots_of(node, "allocatable") not in (None, "0")


def free_nodes(cluster: Cluster) -> list[Obj]:
    """Ready, schedulable Linux nodes (not the benchmark's fake ones) where no agent serves slots."""
    return [
        n
        for n in cluster.core.list_node().items
        if FAKE_NODE_LABEL not in (n.metadata.labels or {})
        and node_is_ready(n)
        and not n.spec.unschedulable
        and n.metadata.labels.get("kubernetes.io/os") == "linux"
        and not has_agent(n)
    ]


def pick_node(cluster: Cluster, wanted: str) -> str:
    """The node to test on: the one asked for, else the first Ready, schedulable Linux node without an agent."""
    nodes = [n for n in cluster.core.list_node().items if FAKE_NODE_LABEL not in (n.metadata.labels or {})]
    if wanted:
        (node,) = [n for n in nodes if n.metadata.name == wanted] or [None]
        if node is None:
            raise AssertionError(f"--e2e-node {wanted}: no such node")
    else:
        # An agent that stopped a moment ago (the test before) keeps its slots allocatable until the
        # kubelet has seen its stream end: give the node that long.
        node = wait_for(
            "a Ready, schedulable Linux node without an fpga-slot agent to test on",
            lambda: next(iter(free_nodes(cluster)), None),
            timeout=FREED_NODE_WAIT_S,
        )
    if has_agent(node):
        pytest.skip(f"node {node.metadata.name} has allocatable {RESOURCE_NAME} (an agent runs there): left alone")
    name: str = node.metadata.name
    return name


def agent_rules(kind: str = "ClusterRole", name: str = "fpga-slot-agent") -> list[Obj]:
    """The rules of the agent's ClusterRole (or a Role) as daemonset/ ships them (so the suite tests the RBAC)."""
    for doc in yaml.safe_load_all((REPO / "daemonset" / "agent-rbac.yaml").read_text()):
        if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
            rules: list[Obj] = doc["rules"]
            return rules
    raise AssertionError(f"daemonset/agent-rbac.yaml has no {kind} {name}")


def agent_pod_body(namespace: str, name: str, node: str, image: str, state: str) -> dict[str, Any]:
    """The agent on simulated slots, as a host-network pod with the kubelet's directories mounted.

    Its simulated slot's device file is a character device (the agent runs as root), so
    the container runtime hands it to a container as it would a real slot's device node.
    """
    script = "\n".join(
        [
            "set -e",
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
                    + [
                        {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                        for var, path in (("NODE_NAME", "spec.nodeName"), ("POD_NAMESPACE", "metadata.namespace"))
                    ],
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
def start_suite(cluster: Cluster, *, image: str, node: str, kubelet_restart: str) -> Iterator[Suite]:
    """The agent as a pod of its own on the node (in a namespace of its own), with the shipped RBAC."""
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
        state_role = {"metadata": {"name": f"{name}-node-state", "namespace": namespace}}
        cluster.rbac.create_namespaced_role(namespace, {**state_role, "rules": agent_rules("Role", NODE_STATE_ROLE)})
        cluster.rbac.create_namespaced_role_binding(
            namespace,
            {
                **state_role,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-node-state"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        )
        cluster.install_node_state_crd()
        cluster.core.create_namespaced_pod(namespace, agent_pod_body(namespace, name, node, image, state))
        suite = Suite(cluster, namespace, node, image, namespace, name, kubelet_restart)
        try:
            cluster.wait_pod(namespace, name, is_ready, "Ready (registered with the kubelet)")
            yield suite
        finally:
            suite.delete_pod(name)  # SIGTERM: the agent removes its socket; the kubelet drops the resource
            suite.run_on_host(f"cleanup-{suffix}", f'rm -rf "/host/{suffix}"', host_path=HOST_DIR)
    finally:
        with contextlib.suppress(ApiException):
            cluster.rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(ApiException):
            cluster.rbac.delete_cluster_role(name)
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespace(namespace)

"""The agent's DaemonSet mounts, sets and probes exactly what the agent's configuration and code use."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import OPTIONS, load_config
from agent.node.health import HealthServer
from agent.programming.fpga_region import DEFAULT_FIRMWARE_DIR
from tests.deploy.manifests import DAEMONSET_DIR, Manifests, Obj, render

DEFAULTS = load_config({}, env={"NODE_NAME": "node-a"})
#: Options holding paths: the mounts are made for their defaults, so the DaemonSet must not move them.
PATH_OPTIONS = {"device_plugin_dir", "pod_resources_socket", "state_dir", "bitstream_dir", "kubeconfig"}
#: Host path -> read-write?, for everything the agent touches on the host.
AGENT_HOST_PATHS: dict[Path, bool] = {
    DEFAULTS.device_plugin_dir: True,  # serves its socket next to kubelet.sock
    DEFAULTS.pod_resources_socket.parent: False,  # the directory, so a new socket after a kubelet restart is seen
    DEFAULTS.state_dir: True,  # checkpoint
    DEFAULTS.bitstream_dir: True,  # catalog (fpga-agent catalog add)
    Path("/sys"): True,  # pyudev's sysfs; the FPGA manager's attributes are written
    Path("/dev"): True,  # the slots' device nodes, the FME node for DFL programming
    Path("/run/udev"): False,  # libudev's database
    DEFAULT_FIRMWARE_DIR: True,  # the FPGA manager loads firmware from the host's directory
}


@pytest.fixture(scope="module")
def daemonset() -> Obj:
    return Manifests(render()).get("DaemonSet", "fpga-slot-agent", "fpga-slot")


@pytest.fixture(scope="module")
def container(daemonset: Obj) -> Obj:
    (agent,) = daemonset["spec"]["template"]["spec"]["containers"]
    result: Obj = agent
    return result


def test_runs_the_agent(container: Obj) -> None:
    assert container["args"] == ["run"]  # the image's entrypoint is fpga-agent
    assert "command" not in container


def test_host_mounts_are_exactly_the_paths_the_agent_uses(daemonset: Obj, container: Obj) -> None:
    volumes = {volume["name"]: volume for volume in daemonset["spec"]["template"]["spec"]["volumes"]}
    host_mounts: dict[Path, bool] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            assert mount["mountPath"] == "/tmp"  # scratch space on a read-only root filesystem
            continue
        host = Path(volume["hostPath"]["path"])
        assert Path(mount["mountPath"]) == host, "the agent sees every host path at the same path"
        host_mounts[host] = not mount.get("readOnly", False)
    assert host_mounts == AGENT_HOST_PATHS
    assert len(volumes) == len(container["volumeMounts"])  # no volume left unmounted


@pytest.mark.parametrize(
    ("volume", "expected_type"),
    [
        pytest.param("device-plugins", "Directory", id="device-plugins-made-by-the-kubelet"),
        pytest.param("pod-resources", "Directory", id="pod-resources-made-by-the-kubelet"),
        pytest.param("state", "DirectoryOrCreate", id="state-made-on-first-start"),
        pytest.param("bitstreams", "DirectoryOrCreate", id="catalog-made-on-first-start"),
    ],
)
def test_host_directories_are_checked_or_created(daemonset: Obj, volume: str, expected_type: str) -> None:
    (found,) = [v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == volume]
    assert found["hostPath"]["type"] == expected_type


def test_node_name_comes_from_the_downward_api_where_the_agent_reads_it(container: Obj) -> None:
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert load_config({}, env={"NODE_NAME": "node-b"}).node_name == "node-b"


def test_the_namespace_comes_from_the_downward_api_where_the_agent_reads_it(daemonset: Obj, container: Obj) -> None:
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert load_config({}, env={"POD_NAMESPACE": "fpga-x"}).namespace == "fpga-x"
    # Without the downward API the agent assumes the namespace it is shipped in, where its Role grants Secrets.
    assert DEFAULTS.namespace == daemonset["metadata"]["namespace"]


def test_other_settings_are_known_options_and_leave_the_paths_at_their_defaults(container: Obj) -> None:
    options = {opt.env: opt.field for opt in OPTIONS}
    from_fields = {
        "NODE_NAME",
        "POD_NAMESPACE",
        "POD_NAME",
        "POD_UID",
        "HOST_IP",
    }  # the downward API: read directly or expanded into other values
    settings = {entry["name"]: entry.get("value") for entry in container["env"] if entry["name"] not in from_fields}
    for name, value in settings.items():
        assert name in options, f"{name} is no agent option"
        assert options[name] not in PATH_OPTIONS, f"{name} moves a path away from its mount"
        assert value is not None
    expanded = {k: str(v).replace("$(HOST_IP)", "192.0.2.2") for k, v in settings.items()}
    load_config({}, env={"NODE_NAME": "node-a", **expanded})


def test_probes_ask_the_agents_health_endpoint_on_the_nodes_own_address(container: Obj) -> None:
    assert DEFAULTS.health_listen is not None
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    liveness, readiness = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
    assert (liveness["path"], readiness["path"]) == ("/healthz", "/readyz")
    assert ports[liveness["port"]] == ports[readiness["port"]] == DEFAULTS.health_listen.port
    # Bound to the node's IP (the downward API's status.hostIP), not to every host address: the
    # kubelet probes the pod IP, which for a host-network pod is that address.
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["FPGA_AGENT_HEALTH_LISTEN"]["value"] == f"$(HOST_IP):{DEFAULTS.health_listen.port}"
    assert list(env).index("HOST_IP") < list(env).index("FPGA_AGENT_HEALTH_LISTEN")  # expansion needs it first
    server = HealthServer(DEFAULTS.health_listen, alive=lambda: None, ready=lambda: None)
    served = {resource.canonical for resource in server.app.router.resources()}
    assert {"/healthz", "/readyz"} <= served


def test_scheduling_and_rollout(daemonset: Obj) -> None:
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeSelector"]["example.com/fpga"] == "true"
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    # In turn: the old agent leaves its checkpoint and removes its socket before the new one starts.
    assert strategy["rollingUpdate"]["maxSurge"] == 0
    assert pod["hostNetwork"] is True  # udev's netlink messages reach the host's network namespace only
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_more_privilege_is_explained(container: Obj) -> None:
    security = container["securityContext"]
    assert security["privileged"] is True
    assert security["readOnlyRootFilesystem"] is True
    text = (DAEMONSET_DIR / "agent-daemonset.yaml").read_text()
    for reason in ("/dev/dfl-fme.N", "device cgroup", "netlink", "sysfs is read-only"):
        assert reason in text

"""DRA mode's manifests: the component daemonset/dra-mode, the overlays that use it and the DRA examples.

The component must mount exactly the paths the agent uses in DRA mode, at the same path inside and
out (the kubelet dials the socket path the agent names), switch the agent to ``--mode dra``, give a
DeviceClass for the driver, and a scheduler profile whose DynamicResources weight makes the cache
preference win over spreading and that calls the extender (prioritize) for every pod.
The selector-less class ``fpga-slot-cached`` of cache-aware claims comes with the admission policy that
refuses its requests unless their selector checks the driver first (the policy's behaviour on the API
server: tests/e2e/test_dra_admission.py). The examples must be valid objects that ask for those classes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from agent.cli.certs import SERVER_SECRET
from agent.config import MODES, load_config
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.dra.cards import CARD_TAINT
from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import SLOT_CAPACITY, bitstream_capacity
from agent.dra.server import PluginSockets
from agent.extender.server import VALIDATE_PATH
from agent.kube.nodefields import PLATFORM_LABEL
from agent.node.reconfigure import ANNOTATION
from tests.deploy.manifests import DAEMONSET_DIR, REPO, Manifests, Obj, load_documents, object_id, render

COMPONENT = DAEMONSET_DIR / "dra-mode"
EXAMPLES = [doc for path in sorted((DAEMONSET_DIR / "examples" / "dra").glob("*.yaml")) for doc in load_documents(path)]
DEFAULTS = load_config({}, env={"NODE_NAME": "node-a"})
KUBERNETES_VERSION = kubernetes_validate.latest_version()
#: Host paths DRA mode adds -> the agent's option that uses them.
DRA_HOST_PATHS = {
    DEFAULTS.dra_registry_dir: "dra_registry_dir",
    DEFAULTS.dra_plugins_dir: "dra_plugins_dir",
    DEFAULTS.cdi_dir: "cdi_dir",
}
#: The class of cache-aware claims (no selector), its admission policy, and what its requests' selectors start with.
CACHED_CLASS = "fpga-slot-cached"
CARD_CLASS = "fpga-card"
POLICY = "fpga-slot-cached-checks-driver"
GUARD = f'device.driver == "{DRIVER_NAME}" && '
#: The most the default spreading scorers (NodeResourcesFit, NodeResourcesBalancedAllocation and
#: ImageLocality, 0-100 each at weight 1) can differ between two nodes.
SPREADING_SPAN = 300
#: DynamicResources' score gap between a node where the first firstAvailable alternative fits and one
#: where the second does, per unit of weight: (8 - 7) / 8 x 100.
FIRST_ALTERNATIVE_GAP = 12.5


def component() -> Obj:
    loaded: Obj = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return loaded


def daemonset_operations() -> list[Obj]:
    (patch,) = [p for p in component()["patches"] if p["target"]["kind"] == "DaemonSet"]
    assert patch["target"]["name"] == "fpga-slot-agent"
    operations: list[Obj] = yaml.safe_load(patch["patch"])
    return operations


def test_the_agent_runs_in_dra_mode_with_exactly_the_host_paths_it_then_uses() -> None:
    operations = [op for op in daemonset_operations() if op["op"] == "add"]
    env = [op["value"] for op in operations if op["path"].endswith("/env/-")]
    assert env == [
        {"name": "FPGA_AGENT_MODE", "value": "dra"},
        {"name": "FPGA_AGENT_BINDING_CONDITIONS", "value": "false"},
        {"name": "FPGA_AGENT_WHOLE_CARDS", "value": "false"},
    ]
    assert "dra" in MODES
    config = load_config({}, {e["name"]: e["value"] for e in env})
    assert (config.mode, config.binding_conditions) == ("dra", False)
    mounts = {op["value"]["name"]: op["value"]["mountPath"] for op in operations if "/volumeMounts/" in op["path"]}
    volumes = {op["value"]["name"]: op["value"]["hostPath"] for op in operations if "/volumes/" in op["path"]}
    assert mounts.keys() == volumes.keys()
    for name, mount in mounts.items():
        assert Path(volumes[name]["path"]) == Path(mount), "the kubelet dials the path the agent names"
    assert {Path(m) for m in mounts.values()} == set(DRA_HOST_PATHS)
    # The kubelet makes its registration directory; the agent makes its own plugin directory and the CDI one.
    assert {Path(v["path"]): v["type"] for v in volumes.values()} == {
        DEFAULTS.dra_registry_dir: "Directory",
        DEFAULTS.dra_plugins_dir: "DirectoryOrCreate",
        DEFAULTS.cdi_dir: "DirectoryOrCreate",
    }


def test_the_device_class_selects_the_drivers_slots_with_one_term_and_serves_the_extended_resource() -> None:
    (device_class,) = load_documents(COMPONENT / "deviceclass.yaml")
    kubernetes_validate.validate(device_class, KUBERNETES_VERSION, strict=True)
    (selector,) = device_class["spec"]["selectors"]
    # Health is a taint on the device (agent.dra.mode.UNHEALTHY_TAINT), not a term evaluated per device.
    assert selector["cel"]["expression"] == f'device.driver == "{DRIVER_NAME}"'
    # Pods written for the device plugin: the scheduler maps the extended resource to this class.
    assert device_class["spec"]["extendedResourceName"] == RESOURCE_NAME


def test_the_cached_device_class_has_no_selector_and_says_what_its_requests_must_check() -> None:
    path = COMPONENT / "deviceclass-cached.yaml"
    (device_class,) = load_documents(path)
    kubernetes_validate.validate(device_class, KUBERNETES_VERSION, strict=True)
    assert device_class["metadata"]["name"] == CACHED_CLASS
    assert device_class["spec"] == {}  # no selector (one CEL evaluation per device), no extended resource
    assert GUARD.strip() in path.read_text()  # documented where users look


def test_the_admission_policy_checks_every_request_of_the_cached_class_in_claims_and_templates() -> None:
    policy, binding = load_documents(COMPONENT / "cached-class-policy.yaml")
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert (policy["kind"], policy["metadata"]["name"]) == ("ValidatingAdmissionPolicy", POLICY)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"]
    assert set(rule["resources"]) == {"resourceclaims", "resourceclaimtemplates"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["prefix"] == f"'{GUARD}'"  # a CEL string: exactly the guard
    assert "spec.spec" in variables["claimSpec"]  # a template's claim spec as well as a claim's
    unguarded = variables["unguarded"]
    for optional in ("r.firstAvailable", "r.exactly", "a.selectors", "r.exactly.selectors", "s.cel"):
        assert f"has({optional})" in unguarded
    assert unguarded.count(f'deviceClassName == "{CACHED_CLASS}"') == 2  # alternatives and exactly requests
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    resources = component()["resources"]
    assert {"deviceclass.yaml", "deviceclass-cached.yaml", "cached-class-policy.yaml"} <= set(resources)


def test_the_scheduler_profile_lets_a_cached_slot_win_over_spreading() -> None:
    config = yaml.safe_load((COMPONENT / "scheduler-config.yaml").read_text())
    shipped = yaml.safe_load((DAEMONSET_DIR / "scheduler-config.yaml").read_text())
    assert [p["schedulerName"] for p in config["profiles"]] == [p["schedulerName"] for p in shipped["profiles"]]
    assert config["leaderElection"] == shipped["leaderElection"]
    (profile,) = config["profiles"]
    (scorer,) = profile["plugins"]["score"]["enabled"]
    assert scorer["name"] == "DynamicResources"
    assert scorer["weight"] * FIRST_ALTERNATIVE_GAP > SPREADING_SPAN


def test_the_scheduler_profile_calls_the_extender_for_every_pod_as_in_device_plugin_mode() -> None:
    """The extender entry is the shipped one (prioritize only, same URL, weight, TLS, ``ignorable``) without
    ``managedResources``: kube-scheduler would call it only for pods that request the extended resource, and a
    DRA pod requests none."""
    config = yaml.safe_load((COMPONENT / "scheduler-config.yaml").read_text())
    shipped = yaml.safe_load((DAEMONSET_DIR / "scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    (expected,) = shipped["extenders"]
    assert "managedResources" not in extender
    assert {key: value for key, value in expected.items() if key != "managedResources"} == extender
    assert extender["ignorable"] is True
    assert extender["prioritizeVerb"] == "prioritize"
    assert not {"filterVerb", "preemptVerb", "bindVerb"} & set(extender)


def test_the_loopback_scheduler_configuration_differs_only_in_where_the_extender_is() -> None:
    """overlays/sim-dra (no cluster DNS) calls the extender at 127.0.0.1 and checks its certificate against the
    Service's name; everything else is the DRA-mode configuration."""
    config = yaml.safe_load((COMPONENT / "scheduler-config.yaml").read_text())
    loopback = yaml.safe_load(
        (REPO / "overlays" / "sim-dra" / "loopback-extender" / "scheduler-config.yaml").read_text()
    )
    (extender,) = loopback["extenders"]
    url = urlsplit(config["extenders"][0]["urlPrefix"])
    assert extender["urlPrefix"] == f"https://127.0.0.1:{url.port}"
    assert extender["tlsConfig"].pop("serverName") == url.hostname
    extender["urlPrefix"] = config["extenders"][0]["urlPrefix"]
    assert loopback == config


@pytest.mark.parametrize("example", EXAMPLES, ids=object_id)
def test_the_dra_examples_are_valid_and_ask_the_drivers_class_for_a_bitstream(example: Obj) -> None:
    kubernetes_validate.validate(example, KUBERNETES_VERSION, strict=True)
    if example["kind"] == "Pod" and "resourceClaims" not in example["spec"]:  # written for the device plugin
        (container,) = example["spec"]["containers"]
        assert container["resources"]["limits"] == {RESOURCE_NAME: "1"}
        assert ANNOTATION in example["metadata"]["annotations"]
        return
    if example["kind"] == "Pod":
        (claim,) = example["spec"]["resourceClaims"]
        for container in example["spec"]["containers"]:
            assert container["resources"]["claims"] == [{"name": claim["name"]}]
        return
    devices = example["spec"]["spec"]["devices"]
    for request in devices["requests"]:
        choices = request.get("firstAvailable") or [request["exactly"]]
        assert {choice["deviceClassName"] for choice in choices} <= {"fpga-slot", CACHED_CLASS, CARD_CLASS}
        for choice in choices:
            if choice["deviceClassName"] == CACHED_CLASS:  # what the admission policy asks
                guarded = any(s["cel"]["expression"].startswith(GUARD) for s in choice.get("selectors", []))
                ours = any(k.startswith(f"{DRIVER_NAME}/") for k in choice.get("capacity", {}).get("requests", {}))
                assert guarded or ours, choice
            if choice["deviceClassName"] == CARD_CLASS:  # card devices are tainted so that slot classes skip them
                assert choice["tolerations"] == [{"key": CARD_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    (config,) = devices["config"]
    assert config["opaque"]["driver"] == DRIVER_NAME
    assert set(config["opaque"]["parameters"]) == {"bitstream"}


def test_the_cache_aware_example_asks_for_the_bitstream_and_any_slot_by_capacity_and_the_platform_by_node() -> None:
    """cached-first.yaml: no CEL at all. ``cached`` asks for the capacity a slot holding the bitstream publishes,
    ``any`` for the capacity every slot publishes; the pod's node selector keeps it to nodes of one platform."""
    (template,) = [e for e in EXAMPLES if e["metadata"]["name"] == "fpga-slot-aes-cached-first"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    cached, any_slot = request["firstAvailable"]
    assert (cached["name"], cached["deviceClassName"]) == ("cached", CACHED_CLASS)
    assert (any_slot["name"], any_slot["deviceClassName"]) == ("any", CACHED_CLASS)
    assert "selectors" not in cached
    assert "selectors" not in any_slot
    assert cached["capacity"] == {"requests": {bitstream_capacity("aes-v1"): "1"}}
    assert bitstream_capacity("aes-v1") == f"{DRIVER_NAME}/bs_aes_dv1"
    assert any_slot["capacity"] == {"requests": {SLOT_CAPACITY: "1"}}
    (pod,) = [e for e in EXAMPLES if e["kind"] == "Pod" and e["metadata"]["name"] == "fpga-dra-cached"]
    assert pod["spec"]["nodeSelector"] == {PLATFORM_LABEL: "sim-pr-v1"}


def test_there_is_an_example_per_use() -> None:
    names = {path.name for path in (DAEMONSET_DIR / "examples" / "dra").glob("*.yaml")}
    assert names == {
        *("one-slot.yaml", "two-slots-one-card.yaml", "cached-first.yaml", "device-plugin-pod.yaml"),
        "whole-card.yaml",
    }
    templates = {e["metadata"]["name"]: e["spec"]["spec"]["devices"] for e in EXAMPLES if e["kind"] != "Pod"}
    assert any("firstAvailable" in r for d in templates.values() for r in d["requests"])
    assert any(
        c.get("matchAttribute") == f"{DRIVER_NAME}/card" for d in templates.values() for c in d.get("constraints", [])
    )


def kustomize(directory: Path) -> list[Obj]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
@pytest.mark.parametrize("overlay", ["dra", "sim-dra"])
def test_the_dra_overlays_render_the_agent_in_dra_mode_with_the_extender(overlay: str) -> None:
    rendered = kustomize(REPO / "overlays" / overlay)
    kinds: dict[str, Any] = {f"{o['kind']}/{o['metadata']['name']}": o for o in rendered}
    assert "DeviceClass/fpga-slot" in kinds
    assert kinds[f"DeviceClass/{CACHED_CLASS}"]["spec"] == {}
    (policy,) = load_documents(COMPONENT / "cached-class-policy.yaml")[:1]
    assert kinds[f"ValidatingAdmissionPolicy/{POLICY}"] == policy
    assert kinds[f"ValidatingAdmissionPolicyBinding/{POLICY}"]["spec"]["policyName"] == POLICY
    for cluster_scoped in (f"DeviceClass/{CACHED_CLASS}", f"ValidatingAdmissionPolicy/{POLICY}"):
        assert "namespace" not in kinds[cluster_scoped]["metadata"]
    for kept in ("Deployment", "Service", "PodDisruptionBudget", "ClusterRole"):
        assert f"{kept}/fpga-slot-extender" in kinds
    rules = kinds["ClusterRole/fpga-slot-extender"]["rules"]
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": ["list", "watch"],
    } in rules
    assert "Deployment/fpga-scheduler" in kinds
    (agent,) = kinds["DaemonSet/fpga-slot-agent"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "FPGA_AGENT_MODE", "value": "dra"} in agent["env"]
    (config_map,) = [o for o in rendered if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("fpga-sch")]
    scheduler_config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    assert scheduler_config == yaml.safe_load(
        (
            COMPONENT / "scheduler-config.yaml"
            if overlay == "dra"
            else REPO / "overlays" / overlay / "loopback-extender" / "scheduler-config.yaml"
        ).read_text()
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
def test_the_agent_is_updated_beside_the_old_pod_with_sockets_of_its_own() -> None:
    daemonset = next(o for o in kustomize(REPO / "overlays" / "dra") if o["kind"] == "DaemonSet")
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert "ports" not in container  # a host port would keep the second pod off the node
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_UID"] == "metadata.uid"
    (command,) = container["readinessProbe"]["exec"]["command"][2:]
    sockets = PluginSockets(DEFAULTS.dra_registry_dir, DEFAULTS.dra_plugins_dir, DRIVER_NAME, "${POD_UID}")
    assert f'"{sockets.registration}"' in command
    listen = next(e["value"] for e in container["env"] if e["name"] == "FPGA_AGENT_HEALTH_LISTEN")
    assert container["livenessProbe"]["httpGet"]["port"] == int(listen.rsplit(":", 1)[1])


# ------------------------------------------------------------------------ the bitstream webhook
WEBHOOK_CONFIGURATION = "fpga-slot-bitstreams"


def test_the_bitstream_webhook_calls_the_extenders_webhook_port_and_never_blocks() -> None:
    """Each webhook: AdmissionReview v1, no side effects, Ignore on failure with a short timeout, the extender's
    Service at the port that reaches ``--webhook-listen``, path /validate; caBundle left to the Job/cert-manager."""
    documents = load_documents(COMPONENT / "bitstream-webhook.yaml")
    for obj in documents:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    (configuration,) = [d for d in documents if d["kind"] == "ValidatingWebhookConfiguration"]
    assert configuration["metadata"]["name"] == WEBHOOK_CONFIGURATION
    assert configuration["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"fpga-slot/{SERVER_SECRET}"}
    # With cert-manager, the CA injector reads that Certificate: the one whose Secret the extender mounts.
    (certificate,) = [
        d
        for d in load_documents(REPO / "overlays" / "cert-manager" / "certificates.yaml")
        if d["kind"] == "Certificate" and d["metadata"]["name"] == SERVER_SECRET
    ]
    assert (certificate["metadata"]["namespace"], certificate["spec"]["secretName"]) == ("fpga-slot", SERVER_SECRET)
    base = Manifests(render())
    service = base.get("Service", "fpga-slot-extender", "fpga-slot")
    (deployment_container,) = base.get("Deployment", "fpga-slot-extender", "fpga-slot")["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e["value"] for e in deployment_container["env"] if "value" in e}
    container_ports = {p["name"]: p["containerPort"] for p in deployment_container["ports"]}
    assert env["FPGA_AGENT_WEBHOOK_LISTEN"] == f"$(POD_IP):{container_ports['webhook']}"
    resources = set()
    for webhook in configuration["webhooks"]:
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["sideEffects"] == "None"
        assert webhook["failurePolicy"] == "Ignore"
        assert 1 <= webhook["timeoutSeconds"] <= 5
        assert webhook["matchConditions"]
        target = webhook["clientConfig"]["service"]
        assert "caBundle" not in webhook["clientConfig"]
        assert (target["name"], target["namespace"], target["path"]) == (
            "fpga-slot-extender",
            "fpga-slot",
            VALIDATE_PATH,
        )
        (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
        assert container_ports[port["targetPort"]] == int(env["FPGA_AGENT_WEBHOOK_LISTEN"].rsplit(":", 1)[1])
        for rule in webhook["rules"]:
            resources |= set(rule["resources"])
            assert "DELETE" not in rule["operations"]
    assert resources == {"resourceclaims", "resourceclaimtemplates", "pods"}
    assert "bitstream-webhook.yaml" in component()["resources"]


def test_the_pod_webhook_is_sent_only_pods_with_a_bitstream_annotation_that_ask_for_slots() -> None:
    (configuration,) = [
        d for d in load_documents(COMPONENT / "bitstream-webhook.yaml") if d["kind"] == "ValidatingWebhookConfiguration"
    ]
    (pods,) = [w for w in configuration["webhooks"] if w["rules"][0]["resources"] == ["pods"]]
    conditions = {c["name"]: c["expression"] for c in pods["matchConditions"]}
    assert f'k == "{ANNOTATION}"' in conditions["names-a-bitstream"]
    assert f'k.startsWith("{ANNOTATION}.")' in conditions["names-a-bitstream"]
    assert conditions["asks-for-slots"].count(f'"{RESOURCE_NAME}" in c.resources.') == 4  # limits, requests x2
    assert "object.spec.resourceClaims" in conditions["asks-for-slots"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
def test_on_a_cluster_without_service_routing_the_api_server_reaches_the_webhook_at_the_loopback() -> None:
    rendered = kustomize(REPO / "overlays" / "sim-dra")
    (service,) = [o for o in rendered if o["kind"] == "Service" and o["metadata"]["name"] == "fpga-slot-extender"]
    assert service["spec"]["type"] == "ExternalName"
    assert service["spec"]["externalName"] == "127.0.0.1"
    (extender,) = [o for o in rendered if o["kind"] == "Deployment" and o["metadata"]["name"] == "fpga-slot-extender"]
    (container,) = extender["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (configuration,) = [o for o in rendered if o["kind"] == "ValidatingWebhookConfiguration"]
    ports = {w["clientConfig"]["service"]["port"] for w in configuration["webhooks"]}
    assert {env["FPGA_AGENT_WEBHOOK_LISTEN"]} == {f"127.0.0.1:{port}" for port in ports}
    (job,) = [o for o in rendered if o["kind"] == "Job" and o["metadata"]["name"] == "fpga-slot-certs"]
    assert (
        f"--webhook-configuration={WEBHOOK_CONFIGURATION}" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    )

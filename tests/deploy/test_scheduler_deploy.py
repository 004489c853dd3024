"""The second scheduler and the extender as deployed: names, ports, verbs and lease fit together."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from agent.config import load_config
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.extender.scoring import ScoreWeights
from agent.extender.server import Extender, build_app
from agent.extender.table import StateTable
from tests.deploy.manifests import DAEMONSET_DIR, Manifests, Obj, containers, kustomization, render

MANIFESTS = Manifests(render())
SCHEDULER_ACCOUNT = "fpga-scheduler"


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DAEMONSET_DIR / "scheduler-config.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def extender_entry(scheduler_config: dict[str, Any]) -> dict[str, Any]:
    (extender,) = scheduler_config["extenders"]
    result: dict[str, Any] = extender
    return result


def only_container(obj: Obj) -> Obj:
    (container,) = containers(obj)
    return container


def served_routes() -> set[tuple[str, str]]:
    cache = StateTable()
    cache.replace({})
    app = build_app(Extender(cache, ScoreWeights()))
    return {(route.method, route.resource.canonical) for route in app.router.routes() if route.resource is not None}


def test_the_url_names_the_extender_service_and_its_port(extender_entry: dict[str, Any]) -> None:
    url = urlsplit(extender_entry["urlPrefix"])
    service_name, namespace, *_ = (url.hostname or "").split(".")
    service = MANIFESTS.get("Service", service_name, namespace)
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    deployment = MANIFESTS.get("Deployment", "fpga-slot-extender", namespace)
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    container = only_container(deployment)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The Service sends to the port `fpga-agent extender` listens on by default.
    assert ports[port["targetPort"]] == load_config({}, env={}).listen.port
    assert container["args"] == ["extender"]


def test_the_verbs_exist_on_the_extender_server(extender_entry: dict[str, Any]) -> None:
    routes = served_routes()
    verbs = [
        extender_entry[key]
        for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")
        if key in extender_entry
    ]
    assert verbs
    for verb in verbs:
        assert ("POST", f"/{verb}") in routes


def test_the_extender_readiness_probe_is_served() -> None:
    container = only_container(MANIFESTS.get("Deployment", "fpga-slot-extender", "fpga-slot"))
    assert ("GET", container["readinessProbe"]["httpGet"]["path"]) in served_routes()


def test_the_extender_manages_the_slot_resource(extender_entry: dict[str, Any]) -> None:
    assert RESOURCE_NAME in {resource["name"] for resource in extender_entry["managedResources"]}


def test_two_extenders_and_a_budget() -> None:
    deployment = MANIFESTS.get("Deployment", "fpga-slot-extender", "fpga-slot")
    assert deployment["spec"]["replicas"] == 2
    budget = MANIFESTS.get("PodDisruptionBudget", "fpga-slot-extender", "fpga-slot")
    assert budget["spec"]["minAvailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_scheduler_runs_the_generated_configuration() -> None:
    scheduler = MANIFESTS.get("Deployment", "fpga-scheduler", "fpga-slot")
    container = only_container(scheduler)
    (config_flag,) = [arg for arg in container["command"] if arg.startswith("--config=")]
    config_path = Path(config_flag.removeprefix("--config="))
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    (volume,) = [v for v in scheduler["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    (generator,) = [g for g in kustomization()["configMapGenerator"] if g["name"] == volume["configMap"]["name"]]
    assert generator["files"] == [config_path.name] == ["scheduler-config.yaml"]
    assert generator["namespace"] == scheduler["metadata"]["namespace"]
    assert scheduler["spec"]["template"]["spec"]["serviceAccountName"] == SCHEDULER_ACCOUNT


def bindings_of(account: str) -> list[Obj]:
    return [
        binding
        for binding in MANIFESTS.of_kind("ClusterRoleBinding") + MANIFESTS.of_kind("RoleBinding")
        if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"])
    ]


def test_the_scheduler_has_the_cluster_schedulers_roles() -> None:
    cluster_roles = {b["roleRef"]["name"] for b in bindings_of(SCHEDULER_ACCOUNT) if b["kind"] == "ClusterRoleBinding"}
    assert cluster_roles == {"system:kube-scheduler", "system:volume-scheduler"}
    (reader,) = [b for b in bindings_of(SCHEDULER_ACCOUNT) if b["metadata"].get("namespace") == "kube-system"]
    assert reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }


def test_the_scheduler_may_hold_its_own_lease(scheduler_config: dict[str, Any]) -> None:
    election = scheduler_config.get("leaderElection", {})
    scheduler = MANIFESTS.get("Deployment", "fpga-scheduler", "fpga-slot")
    if not election.get("leaderElect", True):
        assert scheduler["spec"]["replicas"] == 1  # without election, one scheduler only
        return
    namespace, name = election["resourceNamespace"], election["resourceName"]
    assert name != "kube-scheduler"  # the cluster scheduler's lease, which system:kube-scheduler covers
    granted = set()
    for binding in bindings_of(SCHEDULER_ACCOUNT):
        if binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == namespace:
            role = MANIFESTS.get("Role", binding["roleRef"]["name"], namespace)
            for rule in role["rules"]:
                if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]:
                    granted |= {(n, v) for n in rule.get("resourceNames", []) for v in rule["verbs"]}
    assert granted == {(name, "get"), (name, "update")}  # create comes with system:kube-scheduler
    assert scheduler["spec"]["replicas"] == 2


def test_the_profile_is_the_one_pods_ask_for(scheduler_config: dict[str, Any]) -> None:
    assert [p["schedulerName"] for p in scheduler_config["profiles"]] == ["fpga-scheduler"]

"""The Helm chart renders what kustomize renders, object by object, so the two ways to install cannot drift.

Each case is a kustomization and the chart values that stand for it. The one object only kustomize has is
the Namespace: with Helm the release's namespace is made by ``--create-namespace`` (Helm's convention: a
chart does not own the namespace its release record lives in). The chart's other behaviour (values that
change objects, values.schema.json refusing a wrong value by name, ``helm lint --strict``) is checked here too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.deploy.helmchart import CHART, REPO, by_key, differences, helm_template, kustomize, run, tool

CASES = [
    pytest.param(REPO / "daemonset", (), id="daemonset"),
    pytest.param(REPO / "overlays" / "dra", ("mode=dra",), id="dra"),
    pytest.param(REPO / "overlays" / "sim", ("sim.enabled=true",), id="sim"),
    pytest.param(REPO / "overlays" / "sim-hostnet", ("sim.enabled=true", "hostNetwork=true"), id="sim-hostnet"),
    pytest.param(REPO / "overlays" / "sim-dra", ("mode=dra", "sim.enabled=true", "hostNetwork=true"), id="sim-dra"),
    pytest.param(REPO / "overlays" / "cert-manager", ("certificates.source=cert-manager",), id="cert-manager"),
]


@pytest.mark.parametrize(("kustomization", "values"), CASES)
def test_the_chart_renders_the_objects_of_the_kustomization(kustomization: Path, values: tuple[str, ...]) -> None:
    wanted = by_key(kustomize(kustomization), from_helm=False)
    rendered = by_key(helm_template(*values), from_helm=True)
    assert sorted(set(wanted) - set(rendered)) == ["v1 Namespace /fpga-slot"]
    assert sorted(set(rendered) - set(wanted)) == []
    for name, obj in rendered.items():
        assert obj == wanted[name], "\n".join([name, *differences(obj, wanted[name])])


@pytest.mark.parametrize(
    ("chart_file", "source"),
    [
        ("files/scheduler-config.yaml", "daemonset/scheduler-config.yaml"),
        ("files/scheduler-config-dra.yaml", "daemonset/dra-mode/scheduler-config.yaml"),
        ("crds/fpgabitstream-crd.yaml", "daemonset/fpgabitstream-crd.yaml"),
        ("crds/fpganodestate-crd.yaml", "daemonset/fpganodestate-crd.yaml"),
    ],
)
def test_the_charts_copies_of_whole_files_are_the_same_bytes(chart_file: str, source: str) -> None:
    assert (CHART / chart_file).read_bytes() == (REPO / source).read_bytes(), f"copy {source} to {chart_file}"


def test_helm_lint_strict_passes() -> None:
    for mode in ("device-plugin", "dra"):
        done = run(tool("helm"), "lint", "--strict", str(CHART), "--set", f"mode={mode}")
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("assignment", "named"),
    [
        pytest.param("mode=gpu", "/mode", id="mode"),
        pytest.param("image.pullPolicy=Sometimes", "/image/pullPolicy", id="pull-policy"),
        pytest.param("certificates.source=vault", "/certificates/source", id="certificates"),
        pytest.param("agent.nodeselector.a=b", "/agent", id="misspelt-key"),
        pytest.param("sim.cards=-1", "/sim/cards", id="sim-cards"),
        pytest.param("extender.replicas=0", "/extender/replicas", id="replicas"),
        pytest.param("agent.extraEnv[0].name=X", "/agent/extraEnv/0", id="env-without-value"),
        pytest.param("agent.extraEnv[0].value=1", "/agent/extraEnv/0", id="env-without-name"),
    ],
)
def test_a_wrong_value_fails_naming_it(assignment: str, named: str) -> None:
    done = run(tool("helm"), "template", "fpga-slot", str(CHART), "--set", assignment)
    assert done.returncode != 0
    assert f"at '{named}'" in done.stderr, done.stderr


def test_a_scheduler_without_its_extender_is_refused_naming_both() -> None:
    done = run(tool("helm"), "template", "fpga-slot", str(CHART), "--set", "extender.enabled=false")
    assert done.returncode != 0
    assert "scheduler.enabled=true needs extender.enabled=true" in done.stderr, done.stderr


def agent(objects: list[dict[str, object]]) -> dict[str, object]:
    (found,) = [obj for obj in objects if obj["kind"] == "DaemonSet"]
    return found


def test_the_operators_values_reach_the_agents_pods() -> None:
    objects = helm_template(
        "agent.nodeSelector.fpga=yes",
        "agent.tolerations=null",
        "agent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].key=zone",
        "agent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator=Exists",
        "agent.resources.limits.memory=1Gi",
        "agent.priorityClassName=fpga-nodes",
        "agent.extraArgs={--log-level,debug}",
        "agent.extraEnv[0].name=FPGA_AGENT_LOG_FORMAT",
        "agent.extraEnv[0].value=json",
        "image.repository=registry.example/fpga-slot",
        "image.tag=0.2.0",
        "imagePullSecrets[0].name=regcred",
        "metrics.scrapeAnnotations=true",
    )
    spec = agent(objects)["spec"]["template"]  # type: ignore[index]
    pod = spec["spec"]
    (container,) = pod["containers"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "example.com/fpga": "true", "fpga": "yes"}
    assert "tolerations" not in pod
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
    ]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert pod["priorityClassName"] == "fpga-nodes"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert container["args"] == ["run", "--log-level", "debug"]
    assert container["env"][-1] == {"name": "FPGA_AGENT_LOG_FORMAT", "value": "json"}
    assert container["image"] == "registry.example/fpga-slot:0.2.0"
    assert spec["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8095",
        "prometheus.io/path": "/metrics",
    }
    jobs = [obj for obj in objects if obj["kind"] == "Job"]
    assert {job["spec"]["template"]["spec"]["containers"][0]["image"] for job in jobs} == {  # type: ignore[index]
        "registry.example/fpga-slot:0.2.0"
    }


def test_a_cluster_with_its_own_scheduler_gets_no_scheduler_and_no_extender() -> None:
    objects = helm_template("scheduler.enabled=false", "extender.enabled=false", "mode=dra")
    names = {obj["metadata"]["name"] for obj in objects}
    assert not {name for name in names if "scheduler" in name or "extender" in name or "certs" in name}
    assert {"fpga-slot-agent", "fpga-slot", "fpga-slot-cached"} <= names


def test_a_new_image_renames_the_install_jobs_but_not_the_rest() -> None:
    """A Job's template is immutable: an upgrade to a new tag must make new Jobs, while every other name stays."""

    def names(objects: list[dict[str, object]]) -> set[str]:
        return {f"{obj['kind']}/{obj['metadata']['name']}" for obj in objects}  # type: ignore[index]

    before, after = names(helm_template()), names(helm_template("image.tag=0.2.0"))
    assert {name for name in before - after if not name.startswith("Job/")} == set()
    assert len([name for name in before - after if name.startswith("Job/")]) == 2


def test_the_releases_namespace_is_used_everywhere() -> None:
    text = yaml.safe_dump_all(helm_template("mode=dra", namespace="fpga-test"))
    assert "fpga-slot.svc" not in text
    assert "namespace: fpga-slot\n" not in text
    assert "https://fpga-slot-extender.fpga-test.svc:8888" in text
    assert "cert-manager.io/inject-ca-from: fpga-test/fpga-slot-extender-tls" in text


def load_table_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_values_table", REPO / "scripts" / "helm_values_table.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_values_table_in_operations_md_is_the_schemas() -> None:
    script = load_table_script()
    page = script.PAGE.read_text()
    assert page == script.with_table(page), "docs/operations.md: run python scripts/helm_values_table.py"
    table = script.values_table()
    assert '| `mode` | `"device-plugin"` |' in table
    assert all(line.rstrip(" |").split("|")[-1].strip() for line in table.splitlines()[2:]), "a value undescribed"

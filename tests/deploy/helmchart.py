"""The Helm chart (deploy/helm/fpga-slot) and the kustomize manifests, rendered and made comparable.

Helm adds what its own conventions ask for (the chart's labels, a checksum annotation that rolls the
scheduler on a new configuration, Job names that change with the Job's template), kustomize adds a
content hash to a generated ConfigMap's name; :func:`comparable` takes exactly those away, so what
is left must be equal object by object.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).parents[2]
CHART = REPO / "deploy" / "helm" / "fpga-slot"
NAMESPACE = "fpga-slot"
#: Labels Helm's conventions put on every object's metadata (templates/_helpers.tpl, fpga-slot.chartLabels).
CHART_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by")
JOB_HASH = re.compile(r"-[0-9a-f]{8}$")
GENERATED_CONFIG_MAP = re.compile(r"^(fpga-scheduler-config)-[a-z0-9]{10}$")

Obj = dict[str, Any]


def tool(name: str) -> str:
    """The path of ``helm`` or ``kubectl``: on PATH or in the venv (scripts/setup installs both)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} not found on PATH or in {Path(sys.executable).parent}: run scripts/setup"
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def helm_template(*values: str, namespace: str = NAMESPACE) -> list[Obj]:
    """``helm template`` with the CRDs and the given ``--set`` assignments."""
    sets = [arg for value in values for arg in ("--set", value)]
    done = run(tool("helm"), "template", "fpga-slot", str(CHART), "-n", namespace, "--include-crds", *sets)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def kustomize(directory: Path) -> list[Obj]:
    done = run(tool("kubectl"), "kustomize", str(directory))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['apiVersion']} {obj['kind']} {meta.get('namespace', '')}/{meta['name']}"


def _without_config_hash(name: str) -> str:
    return GENERATED_CONFIG_MAP.sub(r"\1", name)


def comparable(obj: Obj, *, from_helm: bool) -> Obj:
    """The object less what only one of the two tools adds; a scheduler configuration parsed (comments aside)."""
    obj = yaml.safe_load(yaml.safe_dump(obj))
    meta = obj["metadata"]
    if from_helm:
        labels = meta.get("labels") or {}
        for label in CHART_LABELS:
            labels.pop(label, None)
        if "labels" in meta and not labels:
            del meta["labels"]
        if obj["kind"] == "Job":
            meta["name"] = JOB_HASH.sub("", meta["name"])
        annotations = obj.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations")
        if annotations is not None:
            annotations.pop("checksum/config", None)
            if not annotations:
                del obj["spec"]["template"]["metadata"]["annotations"]
    elif obj["kind"] == "ConfigMap":
        meta["name"] = _without_config_hash(meta["name"])
    else:
        for volume in obj.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = _without_config_hash(volume["configMap"]["name"])
    if obj["kind"] == "ConfigMap":
        obj["data"] = {name: yaml.safe_load(text) for name, text in obj.get("data", {}).items()}
    template = obj.get("spec", {}).get("template", {}).get("spec", {})
    for container in template.get("containers", []):
        # kustomize's strategic merge puts the entries a patch changes first; a list of names either way.
        container["env"] = sorted(container.get("env", []), key=lambda entry: entry["name"])
    return _cel_spaced(obj)


def _cel_spaced(value: Any) -> Any:
    """CEL expressions with their white space made single: kustomize re-emits a folded scalar's more-indented
    lines with an extra line break, which CEL does not read."""
    if isinstance(value, dict):
        return {
            name: " ".join(item.split()) if name == "expression" and isinstance(item, str) else _cel_spaced(item)
            for name, item in value.items()
        }
    if isinstance(value, list):
        return [_cel_spaced(item) for item in value]
    return value


def by_key(objects: list[Obj], *, from_helm: bool) -> dict[str, Obj]:
    found: dict[str, Obj] = {}
    for obj in (comparable(obj, from_helm=from_helm) for obj in objects):
        assert key(obj) not in found, f"{key(obj)} twice"
        found[key(obj)] = obj
    return found


def differences(got: object, wanted: object, path: str = "") -> list[str]:
    """Where two objects differ, as ``path: got != wanted`` lines (for a readable failure)."""
    if isinstance(got, dict) and isinstance(wanted, dict):
        found: list[str] = []
        for name in sorted(set(got) | set(wanted)):
            found += differences(got.get(name), wanted.get(name), f"{path}.{name}")
        return found
    if isinstance(got, list) and isinstance(wanted, list) and len(got) == len(wanted):
        return [
            line for i, (a, b) in enumerate(zip(got, wanted, strict=True)) for line in differences(a, b, f"{path}[{i}]")
        ]
    return [] if got == wanted else [f"{path}: {got!r} != {wanted!r}"]

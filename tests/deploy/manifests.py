"""The manifests in daemonset/ as the tests read them: rendered as ``kubectl apply -k`` would.

:func:`render` is a small kustomize for exactly what ``kustomization.yaml`` uses
(``resources``, ``configMapGenerator`` with ``files`` and ``namespace``, ``images``),
so the checks run where no kubectl is installed; where one is, a test compares the
two renderings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).parents[2]
DAEMONSET_DIR = REPO / "daemonset"
EXAMPLES_DIR = DAEMONSET_DIR / "examples"
KUSTOMIZATION = DAEMONSET_DIR / "kustomization.yaml"
NAMESPACE = "fpga-slot"

Obj = dict[str, Any]


def load_documents(path: Path) -> list[Obj]:
    """Every non-empty YAML document of a file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization() -> Obj:
    loaded: Obj = yaml.safe_load(KUSTOMIZATION.read_text())
    return loaded


def render() -> list[Obj]:
    """The objects ``kubectl apply -k daemonset/`` creates (generated ConfigMaps without their hash suffix)."""
    spec = kustomization()
    objects: list[Obj] = []
    for resource in spec.get("resources", []):
        objects.extend(load_documents(DAEMONSET_DIR / resource))
    for generator in spec.get("configMapGenerator", []):
        metadata: Obj = {"name": generator["name"]}
        if "namespace" in generator:
            metadata["namespace"] = generator["namespace"]
        data = {Path(name).name: (DAEMONSET_DIR / name).read_text() for name in generator.get("files", [])}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    images = {image["name"]: image for image in spec.get("images", [])}
    for obj in objects:
        for container in containers(obj):
            name, _, _tag = container["image"].partition(":")
            if name in images:
                new = images[name]
                container["image"] = f"{new.get('newName', name)}:{new.get('newTag', _tag)}"
    return objects


def examples() -> list[Obj]:
    return [doc for path in sorted(EXAMPLES_DIR.glob("*.yaml")) for doc in load_documents(path)]


def pod_spec(obj: Obj) -> Obj | None:
    """The pod spec of a Pod or of a workload's template."""
    if obj.get("kind") == "Pod":
        spec: Obj = obj["spec"]
        return spec
    template = obj.get("spec", {}).get("template")
    return template["spec"] if template else None


def containers(obj: Obj) -> Iterator[Obj]:
    spec = pod_spec(obj)
    if spec is not None:
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


@dataclass(frozen=True)
class Manifests:
    """The rendered objects, looked up by kind and name."""

    objects: list[Obj]

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        found = [
            obj
            for obj in self.objects
            if obj["kind"] == kind
            and obj["metadata"]["name"] == name
            and (namespace is None or obj["metadata"].get("namespace") == namespace)
        ]
        assert len(found) == 1, f"{kind} {name}: {len(found)} found"
        return found[0]

    def of_kind(self, kind: str) -> list[Obj]:
        return [obj for obj in self.objects if obj["kind"] == kind]


def object_id(obj: Obj) -> str:
    namespace = obj["metadata"].get("namespace")
    name = obj["metadata"]["name"]
    return f"{obj['kind']}/{namespace}/{name}" if namespace else f"{obj['kind']}/{name}"

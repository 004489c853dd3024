"""Publish the bench control plane's fake nodes' slot state as FpgaNodeState objects, as the agents would.

The fake nodes (``../shared/k8s/bench/schedbench.py``) carry their slot state in the first
published format, Node annotations. This reads those once and writes one FpgaNodeState per
node (the CRD and namespace too), through agent.slots.published, so that the extender under
benchmark reads real objects. ``bench-cp.sh`` runs it once the nodes exist:

    BENCH_STATE_CMD='.venv/bin/python bench/publish_state.py' ../shared/k8s/scripts/bench-cp.sh start
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.slots.published import GROUP, PLURAL, VERSION, parse_bitstreams, state_object  # noqa: E402

CRD = ROOT / "daemonset" / "fpganodestate-crd.yaml"
LEGACY_SLOTS = "example.com/fpga-slots"
LEGACY_BITSTREAMS = "example.com/fpga-bitstreams"


def node_spec(node: dict[str, Any]) -> dict[str, Any] | None:
    """The FpgaNodeState spec of a fake node's annotations; None without them."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if LEGACY_SLOTS not in annotations:
        return None
    slots = []
    for record in json.loads(annotations[LEGACY_SLOTS]):
        wire = dict(record)
        wire["lastUsed"] = wire.pop("last_used", None)
        slots.append(wire)
    name = node["metadata"]["name"]
    bitstreams = parse_bitstreams(json.loads(annotations.get(LEGACY_BITSTREAMS, "{}")))
    return {"nodeName": name, "slots": sorted(slots, key=lambda s: s["id"]), "bitstreams": bitstreams}


def install_crd(api: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api)
    body = yaml.safe_load(CRD.read_text())
    try:
        extensions.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    for _ in range(120):
        crd = extensions.read_custom_resource_definition(body["metadata"]["name"])
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
            return
        time.sleep(0.5)
    raise RuntimeError("the FpgaNodeState CRD did not become established")


def ensure_namespace(api: client.ApiClient, namespace: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="fpga-slot", help="where the objects go (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=16, help="parallel writes (default: %(default)s)")
    args = parser.parse_args()
    config.load_kube_config(os.environ.get("KUBECONFIG"))
    api = client.ApiClient()
    install_crd(api)
    ensure_namespace(api, args.namespace)
    nodes = client.CoreV1Api(api).list_node(_preload_content=False)
    specs = [spec for node in json.loads(nodes.data)["items"] if (spec := node_spec(node)) is not None]
    custom = client.CustomObjectsApi(api)

    def publish(spec: dict[str, Any]) -> None:
        body = state_object(spec["nodeName"], args.namespace, spec)
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, args.namespace, PLURAL, body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(publish, specs))
    print(f"published {len(specs)} FpgaNodeState objects in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

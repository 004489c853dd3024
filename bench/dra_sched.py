"""DRA runs for ``bench/scheduler.py --dra``: the real kube-scheduler allocating ResourceClaims at 5000 nodes.

On the bench control plane (no kubelet, no controller-manager), every fake node gets
the ResourceSlice its agent would publish in DRA mode, made by the agent's own slice
code (``bench.dra_shapes.node_slice``): one device per slot (4), holding the same
bitstreams as the node's published slot annotation (``bitstream_of``). Each pod of a
run has its own ResourceClaim, made ahead (there is no resourceclaim controller to make
them from a template) in the form under test (``bench.dra_shapes.SHAPES``: the shipped
example's, upstream's plainest, and variants). As in ``sched-bench.sh``: backlog mode,
pods/s from the first bind to the last, seen through a watch of the pods.

Every device is free at the start of a run (claims of earlier runs are deleted with
their pods).
"""

from __future__ import annotations

import http.client
import json
import queue
import random
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent.dra.constants import DRIVER_NAME
from agent.kube.nodefields import PLATFORM_LABEL
from bench.dra_shapes import PLATFORM, node_slices
from bench.procs import terminate

NAMESPACE = "bench-dra"
#: As the bench's node annotations: 4 slots per node, 40 bitstreams.
SLOTS = 4
BITSTREAMS = 40
SERVER = ("127.0.0.1", 16444)
WORKERS = 16
RUN_TIMEOUT_S = 900.0
RESOURCE = "/apis/resource.k8s.io/v1"
UNPROTECT = [{"op": "remove", "path": "/metadata/finalizers"}]


def bitstream_of(node_index: int, slot: int) -> str | None:
    """What slot ``slot`` of fake node ``node_index`` holds: the rule of the bench's slot annotations."""
    value = (node_index * 7 + slot * 13) % (BITSTREAMS + 10)
    return f"bs-{value}" if value < BITSTREAMS else None


class Api:
    """A small client of the bench API server (the rig's admin certificate), one connection per thread."""

    def __init__(self, pki: Path) -> None:
        self._context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        if getattr(self._local, "conn", None) is None:
            self._local.conn = http.client.HTTPSConnection(*SERVER, context=self._context, timeout=120)
        conn: http.client.HTTPSConnection = self._local.conn
        return conn

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        """The status and decoded body; 409 (exists) is an answer, 429/5xx and broken connections are retried.

        Bodies are compact JSON: the API server keeps a claim's opaque parameters as sent and
        compares them byte for byte when the claim is patched later (a spaced encoding would
        make every later patch "change" the immutable spec).
        """
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for attempt in range(6):
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except (http.client.HTTPException, OSError):
                self._local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if response.status == 429 or response.status >= 500:
                time.sleep(0.2 * (attempt + 1))
                continue
            if response.status >= 400 and response.status != 409:
                raise RuntimeError(f"{method} {path}: HTTP {response.status} {raw[:300]!r}")
            return response.status, json.loads(raw) if raw else None
        raise RuntimeError(f"{method} {path}: no answer after retries")

    def patch(self, path: str, body: object) -> None:
        """A JSON patch (404: already gone)."""
        conn = self._connection()
        try:
            conn.request(
                "PATCH", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json-patch+json"}
            )
            response = conn.getresponse()
            raw = response.read()
        except (http.client.HTTPException, OSError):
            self._local.conn = None
            raise
        if response.status >= 400 and response.status != 404:
            raise RuntimeError(f"PATCH {path}: HTTP {response.status} {raw[:300]!r}")

    def context(self) -> ssl.SSLContext:
        return self._context


def in_parallel(items: Sequence[Any], work: Callable[[Any], object]) -> None:
    pending: queue.Queue[Any] = queue.Queue()
    for item in items:
        pending.put(item)
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            try:
                item = pending.get_nowait()
            except queue.Empty:
                return
            try:
                work(item)
            except Exception as exc:  # reported once all workers are done
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def slice_body(node: str) -> dict[str, Any]:
    """The node's slice as its agent publishes it (``bench.dra_shapes.node_slice``), slots as ``bitstream_of``."""
    return slice_bodies(node)[0]


def slice_bodies(node: str, cards: bool = False) -> list[dict[str, Any]]:
    """The node's slices (``bench.dra_shapes.node_slices``; with ``cards`` also its counters' slice)."""
    index = int(node.rsplit("-", 1)[1])
    return node_slices(node, [(bitstream_of(index, slot), 0.0) for slot in range(SLOTS)], cards)


def put(api: Api, collection: str, body: dict[str, Any]) -> None:
    """Create ``body`` in ``collection``, or replace the object of that name."""
    status, _ = api.call("POST", collection, body)
    if status == 409:
        path = f"{collection}/{body['metadata']['name']}"
        _, current = api.call("GET", path)
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        api.call("PUT", path, body)


def fake_nodes(api: Api) -> list[str]:
    _, nodes = api.call("GET", "/api/v1/nodes?labelSelector=rig.example.com%2Ffake%3Dtrue")
    return [n["metadata"]["name"] for n in nodes["items"]]


def publish_slices(api: Api, cards: bool, drop_counters: bool = False) -> None:
    """Every fake node's slices, with its card offered whole (counters) or not (with ``drop_counters``, the
    counters' slice published before is deleted)."""

    def one(node: str) -> None:
        bodies = slice_bodies(node, cards)
        for body in reversed(bodies):  # the counters first: a device never names a set not there
            put(api, f"{RESOURCE}/resourceslices", body)
        if not cards and drop_counters:
            api.call("DELETE", f"{RESOURCE}/resourceslices/{node}-{DRIVER_NAME}-counters")

    in_parallel(fake_nodes(api), one)


def publish(api: Api, device_classes: Sequence[dict[str, Any]]) -> int:
    """The DeviceClasses and one slice per fake node (replaced when they exist); the number of nodes."""
    names = fake_nodes(api)
    for device_class in device_classes:
        put(api, f"{RESOURCE}/deviceclasses", device_class)
    publish_slices(api, cards=False)
    label_platform(api, names)
    api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", service_account)
    return len(names)


def label_platform(api: Api, names: Sequence[str]) -> None:
    """Each fake node's platform label, as an agent sets it on a node whose slots are all of one platform."""
    label = [{"op": "add", "path": "/metadata/labels/" + PLATFORM_LABEL.replace("/", "~1"), "value": PLATFORM}]
    in_parallel(names, lambda node: api.patch(f"/api/v1/nodes/{node}", label))


def wanted_bitstreams(pods: int, seed: int = 7) -> list[str]:
    """Each pod's bitstream: Zipf (s = 1.1) over the bench's 40 names, the same sequence every run."""
    weights = [1 / (rank + 1) ** 1.1 for rank in range(BITSTREAMS)]
    chooser = random.Random(seed)
    return [f"bs-{i}" for i in chooser.choices(range(BITSTREAMS), weights=weights, k=pods)]


def pod_body(name: str, bitstream: str, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod with its own claim (no resourceclaim controller here to make one from a template); the bitstream
    also in the annotation, which the extender reads for pods whose claims it cannot look up by template."""
    container = {
        "name": "c",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}, "claims": [{"name": "fpga"}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "dra-bench"},
            "annotations": {"example.com/fpga-bitstream": bitstream},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "fpga", "resourceClaimName": name}],
            "containers": [container],
            **({"nodeSelector": node_selector} if node_selector else {}),
        },
    }


def clear(api: Api) -> None:
    """Delete the run's pods and claims (their allocations free the devices) and wait until they are gone.

    An allocated claim carries the finalizer ``resource.kubernetes.io/delete-protection``, which the
    resourceclaim controller removes; the bench control plane runs none, so it is removed here.
    """
    delete = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    claims = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    for path in (f"/api/v1/namespaces/{NAMESPACE}/pods", claims):
        api.call("DELETE", path, delete)
        if path == claims:
            names = [
                c["metadata"]["name"] for c in api.call("GET", claims)[1]["items"] if c["metadata"].get("finalizers")
            ]
            in_parallel(names, lambda name: api.patch(f"{claims}/{name}", UNPROTECT))
        for _ in range(600):
            if not api.call("GET", f"{path}?limit=1")[1]["items"]:
                break
            time.sleep(0.5)


class BindWatch:
    """When each pod of the namespace was seen bound, from a watch started before the scheduler."""

    def __init__(self, api: Api, expected: int) -> None:
        self._api = api
        self.expected = expected
        self.bound: dict[str, float] = {}
        self.done = threading.Event()
        _, listed = api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        self._version = listed["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self.done.is_set():
            conn = http.client.HTTPSConnection(*SERVER, context=self._api.context(), timeout=3600)
            try:
                conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={self._version}")
                response = conn.getresponse()
                while not self.done.is_set():
                    line = response.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    pod = event.get("object", {})
                    self._version = pod.get("metadata", {}).get("resourceVersion", self._version)
                    name = pod.get("metadata", {}).get("name")
                    if pod.get("spec", {}).get("nodeName") and name not in self.bound:
                        self.bound[name] = time.time()
                        if len(self.bound) >= self.expected:
                            self.done.set()
            except (http.client.HTTPException, OSError, ValueError):
                time.sleep(0.2)
            finally:
                conn.close()


def run(
    api: Api,
    scheduler: list[str],
    pods: int,
    log: Path,
    claim: Callable[[str, str], dict[str, Any]],
    node_selector: dict[str, str] | None = None,
) -> float:
    """One backlog run: claims and pods made, the scheduler started, pods/s from the first bind to the last."""
    clear(api)
    names = [f"p-{i:06d}" for i in range(pods)]
    wanted = dict(zip(names, wanted_bitstreams(pods), strict=True))
    claims = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    in_parallel(names, lambda name: api.call("POST", claims, claim(name, wanted[name])))
    pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    in_parallel(names, lambda name: api.call("POST", pods_path, pod_body(name, wanted[name], node_selector)))
    watch = BindWatch(api, pods)
    with log.open("ab") as output:
        process = subprocess.Popen(scheduler, stdout=output, stderr=output, start_new_session=True)
        finished = watch.done.wait(RUN_TIMEOUT_S)
        terminate(process)
    if not finished:
        raise SystemExit(f"DRA run: {len(watch.bound)} of {pods} pods bound within {RUN_TIMEOUT_S:.0f} s (log {log})")
    times = sorted(watch.bound.values())
    clear(api)
    return len(times) / max(times[-1] - times[0], 1e-9)

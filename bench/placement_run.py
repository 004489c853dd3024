"""One backlog run of ``bench/placement_scale.py``: pods made, the scheduler started, each bind counted.

The pods (and, in DRA mode, their claims) are made first; a watch of the namespace's
pods, started before the scheduler, hands every pod seen bound to a
:class:`BindCounter` in the order of the binds, which counts it against the truth
(``bench.placement_state``) and has its node's FpgaNodeState republished by the
:class:`Publisher` as the node's agent would.
"""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from agent.slots.published import GROUP, PLURAL, VERSION, state_object
from bench.dra_sched import RESOURCE, SERVER, UNPROTECT, Api, in_parallel
from bench.placement_state import ClusterState
from bench.procs import terminate

RUN_TIMEOUT_S = 1800.0
PUBLISHERS = 4
DELETE = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
#: Where the agents of the shipped install publish their FpgaNodeStates.
STATE_NAMESPACE = "fpga-slot"
STATES = f"/apis/{GROUP}/{VERSION}/namespaces/{STATE_NAMESPACE}/{PLURAL}"
NODE_STATE_CRD = Path(__file__).resolve().parents[1] / "daemonset" / "fpganodestate-crd.yaml"


def ensure_node_states(api: Api) -> None:
    """The FpgaNodeState CRD (served) and the namespace the agents publish in."""
    api.call(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(NODE_STATE_CRD.read_text())
    )
    api.call(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STATE_NAMESPACE}}
    )
    for _ in range(120):
        try:
            api.call("GET", f"{STATES}?limit=1")
            return
        except RuntimeError:  # 404 until the CRD is served
            time.sleep(0.5)
    raise RuntimeError("the FpgaNodeState CRD is not served")


def ensure_namespace(api: Api, namespace: str) -> None:
    api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    api.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)


def clear_namespace(api: Api, namespace: str) -> None:
    """Delete the namespace's pods and claims (the claims' protecting finalizers removed) and wait until gone."""
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    for path in (f"/api/v1/namespaces/{namespace}/pods", claims):
        api.call("DELETE", path, DELETE)
        if path == claims:
            items = api.call("GET", claims)[1]["items"]
            names = [c["metadata"]["name"] for c in items if c["metadata"].get("finalizers")]
            in_parallel(names, lambda name: api.patch(f"{claims}/{name}", UNPROTECT))
        for _ in range(600):
            if not api.call("GET", f"{path}?limit=1")[1]["items"]:
                break
            time.sleep(0.5)


class Publisher:
    """Merge-patches nodes' FpgaNodeStates from the state (made when missing), on worker threads (the latest state
    of a node). A node is always published by the same thread, so its states arrive in order, as from its agent."""

    def __init__(self, api: Api, state: ClusterState, names: list[str]) -> None:
        self._api, self._state, self._names = api, state, names
        self.lock = threading.Lock()
        self._pending: list[queue.Queue[str | None]] = [queue.Queue() for _ in range(PUBLISHERS)]
        self._threads = [threading.Thread(target=self._work, args=(q,), daemon=True) for q in self._pending]
        self._local = threading.local()

    def __enter__(self) -> Publisher:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        for pending in self._pending:
            pending.put(None)
        for thread in self._threads:
            thread.join()

    def publish_all(self) -> None:
        in_parallel(self._names, self._patch)

    def changed(self, node: str) -> None:
        self._pending[zlib.crc32(node.encode()) % PUBLISHERS].put(node)

    def _work(self, pending: queue.Queue[str | None]) -> None:
        while (node := pending.get()) is not None:
            self._patch(node)

    def _patch(self, node: str) -> None:
        with self.lock:
            spec = self._state.spec(node)
        body = json.dumps({"spec": spec}).encode()
        headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
        for attempt in range(5):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPSConnection(*SERVER, context=self._api.context(), timeout=60)
            try:
                conn.request("PATCH", f"{STATES}/{node}", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (http.client.HTTPException, OSError):
                self._local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if response.status < 300:
                return
            if response.status == 404:  # its first state
                self._api.call("POST", STATES, state_object(node, STATE_NAMESPACE, spec))
                return
            if response.status != 429 and response.status < 500:
                raise RuntimeError(f"PATCH FpgaNodeState {node}: HTTP {response.status}")
            time.sleep(0.2 * (attempt + 1))
        raise RuntimeError(f"PATCH FpgaNodeState {node}: no answer after retries")


class BindCounter:
    """Counts each bound pod against the state, once, and tells ``changed`` (if any) which node changed."""

    def __init__(
        self,
        state: ClusterState,
        bitstreams: dict[str, str],
        changed: Callable[[str], None] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self._state, self._bitstreams, self._changed = state, bitstreams, changed
        #: Guards the state (shared with whoever reads it meanwhile, the Publisher).
        self.lock = lock if lock is not None else threading.Lock()
        self.bound: dict[str, float] = {}

    def bind(self, pod: str, node: str) -> None:
        if pod in self.bound or pod not in self._bitstreams:
            return
        now = time.time()
        with self.lock:
            self.bound[pod] = now
            self._state.take(node, self._bitstreams[pod], int(now))
        if self._changed is not None:
            self._changed(node)


def watch_binds(
    api: Api, namespace: str, version: str, counter: BindCounter, expected: int, done: threading.Event
) -> None:
    """Follow the namespace's pods from ``version`` until ``expected`` were seen bound (or ``done`` is set)."""
    while not done.is_set():
        conn = http.client.HTTPSConnection(*SERVER, context=api.context(), timeout=3600)
        try:
            conn.request("GET", f"/api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion={version}")
            response = conn.getresponse()
            while not done.is_set():
                line = response.readline()
                if not line:
                    break
                pod = json.loads(line).get("object", {})
                metadata = pod.get("metadata", {})
                version = metadata.get("resourceVersion", version)
                node = pod.get("spec", {}).get("nodeName")
                if node:
                    counter.bind(metadata.get("name", ""), node)
                    if len(counter.bound) >= expected:
                        done.set()
        except (http.client.HTTPException, OSError, ValueError):
            time.sleep(0.2)
        finally:
            conn.close()


def backlog_run(
    api: Api,
    namespace: str,
    bitstreams: dict[str, str],
    pod_body: Callable[[str, str], dict[str, Any]],
    claim_body: Callable[[str, str], dict[str, Any]] | None,
    counter: BindCounter,
    scheduler: list[str],
    log: Path,
) -> float:
    """Pods (and claims) made, the scheduler started, every pod counted as bound; pods/s first to last bind."""
    clear_namespace(api, namespace)
    names = list(bitstreams)
    if claim_body is not None:
        claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
        in_parallel(names, lambda name: api.call("POST", claims, claim_body(name, bitstreams[name])))
    pods = f"/api/v1/namespaces/{namespace}/pods"
    in_parallel(names, lambda name: api.call("POST", pods, pod_body(name, bitstreams[name])))
    _, listed = api.call("GET", pods)
    done = threading.Event()
    watcher = threading.Thread(
        target=watch_binds,
        args=(api, namespace, listed["metadata"]["resourceVersion"], counter, len(names), done),
        daemon=True,
    )
    watcher.start()
    with log.open("ab") as output:
        process = subprocess.Popen(scheduler, stdout=output, stderr=output, start_new_session=True)
        finished = done.wait(RUN_TIMEOUT_S)
        done.set()
        terminate(process)
    if not finished:
        raise SystemExit(f"{len(counter.bound)} of {len(names)} pods bound within {RUN_TIMEOUT_S:.0f} s (log {log})")
    times = sorted(counter.bound.values())
    clear_namespace(api, namespace)
    return len(times) / max(times[-1] - times[0], 1e-9)

"""This node's published slot state: its FpgaNodeState object and its platform labels; every Node for the view.

:class:`NodePublisher` writes only what differs from what the API server showed last, paced,
retried with backoff, and reads both again every ``RESYNC_S``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.errors import KubeError
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls
from agent.kube.failurelog import FailureLog
from agent.kube.nodefields import (
    MAX_LABEL_LEN,
    OwnedFields,
    as_mapping,
    clear_body,
    is_label_name,
    keys_of,
    owned_fields,
    patch_body,
    platform_labels,
)
from agent.kube.reflector import CONNECT_TIMEOUT_S, Backoff, waited
from agent.kube.stateobject import StateObjects, StoredState, is_current

logger = logging.getLogger(__name__)

#: Writes start at least this far apart (about two per second); changes in between are folded together.
MIN_PATCH_INTERVAL_S = 0.5
#: How often the Node and the object are read again to put right what others changed (or deleted).
RESYNC_S = 600.0
#: How often a publisher in standby looks whether it still is.
STANDBY_CHECK_S = 1.0
#: Read timeout of one request.
REQUEST_TIMEOUT_S = 10.0
PUBLISH_BACKOFF = Backoff(initial_s=1.0, max_s=60.0)
#: Nodes per page when listing every Node (as kubectl does).
LIST_PAGE_SIZE = 500
LIST_TIMEOUT_S = 60.0

_MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "fpga-slot"
_UNREAD: Any = object()  # the object has not been read yet (None: read, and there is none)


class NodePublisher:
    """Keeps this node's FpgaNodeState and platform labels equal to the latest :meth:`update` (call it on the loop
    that runs :meth:`run`). ``pod_name``: the agent's pod, whose DaemonSet owns the object."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        *,
        namespace: str = "fpga-slot",
        pod_name: str = "",
        min_interval_s: float = MIN_PATCH_INTERVAL_S,
        backoff: Backoff = PUBLISH_BACKOFF,
        resync_s: float = RESYNC_S,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.node_name = node_name
        self.namespace = namespace
        self._pod_name = pod_name
        #: While this says True, nothing is written (a newer agent on the node publishes: an update's overlap).
        self.standby: Callable[[], bool] = lambda: False
        self._core = CoreCalls(api_client)
        self._objects = StateObjects(api_client, node_name, namespace, timeout_s)
        self._min_interval_s = min_interval_s
        self._backoff = backoff
        self._resync_s = resync_s
        self._timeout_s = timeout_s
        self._desired: OwnedFields | None = None
        self._desired_spec: Mapping[str, Any] | None = None
        #: The owned keys as the Node showed them last (GET or PATCH answer); None: read it first.
        self._current: OwnedFields | None = None
        self._stored: StoredState | None = _UNREAD
        self._owner: dict[str, Any] | None = _UNREAD
        self._stood_by = False
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._last_patch: float | None = None
        self._failures = FailureLog(logger, f"publishing slot state of node {node_name}")
        self._reported_platforms: set[str] = set()
        self._reported_dropped = False
        #: Node patches, FpgaNodeState writes, reads of either, failed rounds.
        self.patches = 0
        self.writes = 0
        self.reads = 0
        self.failures = 0

    def update(self, spec: Mapping[str, Any], platforms: Set[str]) -> None:
        """Make this the state to publish; returns at once (the newest state wins)."""
        for platform in sorted(set(platforms) - self._reported_platforms):
            if not is_label_name(platform):
                self._reported_platforms.add(platform)
                logger.warning(
                    "node %s: platform %r is not a valid label value (at most %d letters, digits, '-', '_', '.', "
                    "alphanumeric at both ends): no platform label for it; its FpgaNodeState still names it",
                    self.node_name,
                    platform,
                    MAX_LABEL_LEN,
                )
        desired = OwnedFields({}, platform_labels(platforms))
        if desired == self._desired and spec == self._desired_spec:
            return
        self._desired = desired
        self._desired_spec = spec
        self._settled.clear()
        self._wake.set()

    @property
    def daemonset(self) -> str | None:
        """The name of the DaemonSet that owns this node's FpgaNodeState (read once); None when unknown."""
        owner = self._owner
        return owner.get("name") if isinstance(owner, dict) and isinstance(owner.get("name"), str) else None

    @property
    def published(self) -> bool:
        """Whether the API server showed the latest desired state when last read or written."""
        return self._settled.is_set()

    async def wait_published(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until the latest update is published; False on timeout."""
        return await waited(self._settled.wait(), timeout_s)

    async def run(self) -> None:
        """Publish until cancelled: wait for a difference, pace, write, retry with backoff."""
        attempt = 0
        while True:
            await self._wait_for_work()
            if self._last_patch is not None:  # pace the writes
                delay = self._last_patch + self._min_interval_s - asyncio.get_running_loop().time()
                if delay > 0:
                    await asyncio.sleep(delay)
            try:
                await self._publish()
            except Exception as exc:
                # The outcome is unknown: read both before the next write.
                self._current, self._stored = None, _UNREAD
                self.failures += 1
                kind, text = describe_api_error(exc)
                delay = self._backoff.delay_s(attempt)
                attempt += 1
                self._failures.failed(kind, text, f"trying again in {delay:.1f}s")
                await asyncio.sleep(delay)
                continue
            attempt = 0
            self._failures.succeeded()

    def _has_work(self) -> bool:
        if self._desired is None or self._desired_spec is None:
            return False
        if self.standby():
            self._stood_by = True
            return False
        if self._stood_by:  # another agent may have written meanwhile: read both before writing
            self._stood_by = False
            self._current, self._stored = None, _UNREAD
        if self._current is None or self._stored is _UNREAD or self._owner is _UNREAD:
            return True
        return patch_body(self._desired, self._current) is not None or not is_current(
            self._stored, self._desired_spec, self._owner
        )

    async def _wait_for_work(self) -> None:
        while True:
            if self._has_work():
                return
            self._settled.set()
            self._wake.clear()
            # While in standby, look again every STANDBY_CHECK_S (it ends without an update).
            woken = await waited(self._wake.wait(), STANDBY_CHECK_S if self._stood_by else self._resync_s)
            if not woken and self._desired is not None and not self._stood_by:
                self._current, self._stored = None, _UNREAD  # read both again and put right what differs

    async def clear(self) -> bool:
        """Remove the platform labels (and old annotations) from the Node, then delete the FpgaNodeState; call it
        once ``run`` has ended. False, with a warning, when the labels could not be removed; an undeletable object
        is left to the garbage collector."""
        try:
            current = await asyncio.to_thread(self._read)
            body = clear_body(current)
            if body is not None:
                await asyncio.to_thread(self._patch, body)
        except Exception as exc:
            kind, text = describe_api_error(exc)
            logger.warning("node %s: slot state not removed (%s: %s)", self.node_name, kind, text)
            return False
        try:
            await asyncio.to_thread(self._objects.delete)
        except Exception as exc:
            kind, text = describe_api_error(exc)
            logger.info("node %s: FpgaNodeState left for the garbage collector (%s: %s)", self.node_name, kind, text)
        logger.info("removed the platform labels and the FpgaNodeState of node %s", self.node_name)
        return True

    async def _publish(self) -> None:
        """The labels and the object, each tried even when the other fails (the first failure is raised)."""
        failures: list[Exception] = []
        for step in (self._publish_labels, self._publish_state):
            try:
                await step()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    async def _publish_labels(self) -> None:
        if self._current is None:
            self.reads += 1
            self._current = await asyncio.to_thread(self._read)
        desired = self._desired
        assert desired is not None
        body = patch_body(desired, self._current)
        if body is None:
            return
        self._last_patch = asyncio.get_running_loop().time()
        current = await asyncio.to_thread(self._patch, body)
        self.patches += 1
        logger.info("node %s: platform labels set (%s)", self.node_name, ", ".join(sorted(keys_of(body))))
        if patch_body(desired, current) is not None and not self._reported_dropped:
            # Something (an admission webhook?) changed our keys on the way in: do not patch in a loop.
            self._reported_dropped = True
            logger.warning(
                "node %s: the API server did not keep the platform labels patched in; not patching again "
                "until they change",
                self.node_name,
            )
            current = desired
        self._current = current

    async def _publish_state(self) -> None:
        if self._owner is _UNREAD:
            self._owner = await asyncio.to_thread(self._objects.daemonset_owner, self._pod_name)
        if self._stored is _UNREAD:
            self.reads += 1
            self._stored = await asyncio.to_thread(self._objects.read)
        spec = self._desired_spec
        assert spec is not None
        if is_current(self._stored, spec, self._owner):
            return
        self._last_patch = asyncio.get_running_loop().time()
        try:
            self._stored = await asyncio.to_thread(self._objects.write, spec, self._owner, self._stored)
        except Exception as exc:
            if api_status(exc) in (404, 409):  # deleted or changed since it was read: read it, then write again
                self._stored = _UNREAD
            raise
        self.writes += 1
        if self.writes == 1:
            logger.info(
                "published slot state of node %s as FpgaNodeState %s/%s", self.node_name, self.namespace, self.node_name
            )

    # --- worker thread --------------------------------------------------------------

    def _read(self) -> OwnedFields:
        response = self._core.read_node(
            self.node_name, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, self._timeout_s)
        )
        return owned_fields(_json_object(response))

    def _patch(self, body: dict[str, Any]) -> OwnedFields:
        response = self._core.patch_node(
            self.node_name,
            body,
            field_manager=FIELD_MANAGER,
            _content_type=_MERGE_PATCH,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, self._timeout_s),
        )
        return owned_fields(_json_object(response))


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A Node as the cluster view needs it: its name and its owned labels (all others dropped)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def list_nodes(api_client: client.ApiClient) -> list[NodeSummary]:
    """Every Node, sorted by name, with only the owned labels. Blocking; KubeError naming the failure."""
    core = CoreCalls(api_client)
    nodes: list[NodeSummary] = []
    for item in _pages(core.list_node, "nodes"):
        name = as_mapping(item.get("metadata")).get("name")
        if isinstance(name, str) and name:
            nodes.append(NodeSummary(name, owned_fields(item).labels))
    return sorted(nodes, key=lambda node: node.name)


def list_node_states(api_client: client.ApiClient) -> list[Mapping[str, Any]]:
    """Every FpgaNodeState object as the API server sends it (JSON). Blocking; KubeError naming the failure."""
    core = CoreCalls(api_client)
    return _pages(core.list_fpga_node_state_for_all_namespaces, "FpgaNodeState objects")


def list_resource_claims(api_client: client.ApiClient) -> list[Mapping[str, Any]]:
    """Every ResourceClaim as the API server sends it (JSON), for what their slots hold. Blocking; KubeError."""
    core = CoreCalls(api_client)
    return _pages(core.list_resource_claim_for_all_namespaces, "ResourceClaims")


def _pages(list_func: Callable[..., Any], what: str) -> list[Mapping[str, Any]]:
    """Every item of a paged list (a large cluster's objects do not arrive as one response)."""
    items: list[Mapping[str, Any]] = []
    token = ""
    try:
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
            if token:
                kwargs["_continue"] = token
            response = list_func(_preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, LIST_TIMEOUT_S), **kwargs)
            body = _json_object(response)
            items.extend(as_mapping(item) for item in body.get("items") or [])
            token = str(as_mapping(body.get("metadata")).get("continue") or "")
            if not token:
                return items
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        _, text = describe_api_error(exc)
        raise KubeError(f"listing {what} failed: {text}") from exc


def _json_object(response: Any) -> dict[str, Any]:
    """The JSON object of an unparsed response (``_preload_content=False``), connection released."""
    try:
        data = response.data
    finally:
        response.release_conn()
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("the API server's answer is not a JSON object")
    return body

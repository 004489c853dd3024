"""This node's published slot state: its FpgaNodeState object and its platform labels; every Node for the view.

:class:`NodePublisher` writes only what differs from what the API server showed last, paced,
retried with backoff, and reads both again every ``RESYNC_S``. The object is written whole (schema:
``agent.slots.published``) and owned by the agent's DaemonSet, so the garbage collector removes it with the install.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from agent.kube.client import REQUEST_TIMEOUT_S, FailureLog, api_status, describe_api_error
from agent.kube.core import CoreCalls, list_pages
from agent.kube.nodefields import (
    MAX_LABEL_LEN,
    OwnedFields,
    as_mapping,
    is_label_name,
    keys_of,
    owned_fields,
    patch_body,
    platform_labels,
)
from agent.kube.reflector import CONNECT_TIMEOUT_S, LIST_TIMEOUT_S, Backoff, waited
from agent.slots.published import state_object

logger = logging.getLogger(__name__)

#: Writes start at least this far apart (about two per second); changes in between are folded together.
MIN_PATCH_INTERVAL_S = 0.5
#: How often the Node and the object are read again to put right what others changed (or deleted).
RESYNC_S = 600.0
#: How often a publisher in standby looks whether it still is.
STANDBY_CHECK_S = 1.0
PUBLISH_BACKOFF = Backoff(initial_s=1.0, max_s=60.0)
#: (connect, read) timeouts of one request, and of one page of a list.
REQUEST_TIMEOUT = (CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S)
_LIST_TIMEOUT = (CONNECT_TIMEOUT_S, LIST_TIMEOUT_S)
FIELD_MANAGER = "fpga-slot"
_UNREAD: Any = object()  # the object has not been read yet (None: read, and there is none)


@dataclass(frozen=True, slots=True)
class StoredState:
    """The FpgaNodeState as the API server showed it last: its spec, owners and resourceVersion."""

    spec: Mapping[str, Any]
    owners: tuple[Mapping[str, Any], ...]
    resource_version: str


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
    ) -> None:
        self.node_name = node_name
        self.namespace = namespace
        self._pod_name = pod_name
        #: While this says True, nothing is written (a newer agent on the node publishes: an update's overlap).
        self.standby: Callable[[], bool] = lambda: False
        self._core = CoreCalls(api_client)
        self._min_interval_s = min_interval_s
        self._backoff = backoff
        self._resync_s = resync_s
        self._desired: OwnedFields | None = None
        self._desired_spec: Mapping[str, Any] | None = None
        #: The owned keys as the Node showed them last (GET or PATCH answer); None: read it first.
        self._current: OwnedFields | None = None
        self._stored: StoredState | None = _UNREAD
        self._owner: dict[str, Any] | None = _UNREAD
        self._stood_by = False
        self._wake = asyncio.Event()
        #: Set while the API server showed the latest desired state when last read or written.
        self.settled = asyncio.Event()
        self.settled.set()
        self._last_patch: float | None = None
        self._failures = FailureLog(logger, f"publishing slot state of node {node_name}")
        self._reported_platforms: set[str] = set()
        self._reported_dropped = False
        self.writes = 0

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
        self.settled.clear()
        self._wake.set()

    @property
    def daemonset(self) -> str | None:
        """The name of the DaemonSet that owns this node's FpgaNodeState (read once); None when unknown."""
        owner = self._owner
        return owner.get("name") if isinstance(owner, dict) and isinstance(owner.get("name"), str) else None

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
            self.settled.set()
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
            body = patch_body(OwnedFields(), current)
            if body is not None:
                await asyncio.to_thread(self._patch, body)
        except Exception as exc:
            kind, text = describe_api_error(exc)
            logger.warning("node %s: slot state not removed (%s: %s)", self.node_name, kind, text)
            return False
        try:
            await asyncio.to_thread(self._delete_state)
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
            self._current = await asyncio.to_thread(self._read)
        desired = self._desired
        assert desired is not None
        body = patch_body(desired, self._current)
        if body is None:
            return
        self._last_patch = asyncio.get_running_loop().time()
        current = await asyncio.to_thread(self._patch, body)
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
            self._owner = await asyncio.to_thread(self._daemonset_owner)
        if self._stored is _UNREAD:
            self._stored = await asyncio.to_thread(self._read_state)
        spec = self._desired_spec
        assert spec is not None
        if is_current(self._stored, spec, self._owner):
            return
        self._last_patch = asyncio.get_running_loop().time()
        try:
            self._stored = await asyncio.to_thread(self._write_state, spec, self._owner, self._stored)
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
        return owned_fields(self._core.read_node(self.node_name, _request_timeout=REQUEST_TIMEOUT))

    def _patch(self, body: dict[str, Any]) -> OwnedFields:
        return owned_fields(
            self._core.patch_node(self.node_name, body, field_manager=FIELD_MANAGER, _request_timeout=REQUEST_TIMEOUT)
        )

    def _daemonset_owner(self) -> dict[str, Any] | None:
        """The ownerReference of the DaemonSet that runs the agent's pod; None outside a DaemonSet's pod."""
        if not self._pod_name:
            return None
        try:
            pod = self._core.read_namespaced_pod(self._pod_name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except Exception as exc:
            if api_status(exc) == 404:
                logger.warning(
                    "the agent's pod %s/%s is not there: its node's FpgaNodeState gets no owner",
                    self.namespace,
                    self._pod_name,
                )
                return None
            raise
        ref = controller_daemonset(pod)
        if ref is None or not ref.get("uid"):
            return None
        return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ref.get("name"), "uid": ref.get("uid")}

    def _read_state(self) -> StoredState | None:
        try:
            obj = self._core.read_namespaced_fpga_node_state(
                self.node_name, self.namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            if api_status(exc) == 404:
                return None
            raise
        return _stored(obj)

    def _write_state(
        self, spec: Mapping[str, Any], owner: Mapping[str, Any] | None, current: StoredState | None
    ) -> StoredState:
        """Create the object, or replace the one read as ``current`` (a 409 if it changed since: read it again)."""
        body = state_object(self.node_name, self.namespace, spec, owner)
        options: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_request_timeout": REQUEST_TIMEOUT}
        if current is None:
            return _stored(self._core.create_namespaced_fpga_node_state(self.namespace, body, **options))
        body["metadata"]["resourceVersion"] = current.resource_version
        return _stored(self._core.replace_namespaced_fpga_node_state(self.node_name, self.namespace, body, **options))

    def _delete_state(self) -> None:
        try:
            self._core.delete_namespaced_fpga_node_state(
                self.node_name, self.namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            if api_status(exc) != 404:
                raise


def controller_daemonset(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference of the DaemonSet that controls ``pod`` (JSON); None when there is none."""
    refs = [as_mapping(ref) for ref in as_mapping(pod.get("metadata")).get("ownerReferences") or []]
    return next((ref for ref in refs if ref.get("kind") == "DaemonSet" and ref.get("controller")), None)


def is_current(stored: StoredState | None, spec: Mapping[str, Any], owner: Mapping[str, Any] | None) -> bool:
    """Whether the stored object already says ``spec`` with ``owner`` as its only owner."""
    if stored is None or dict(stored.spec) != dict(spec):
        return False
    wanted = () if owner is None else (dict(owner),)
    return tuple(_owner_key(ref) for ref in stored.owners) == tuple(_owner_key(ref) for ref in wanted)


def _owner_key(ref: Mapping[str, Any]) -> tuple[object, object]:
    return ref.get("kind"), ref.get("uid")


def _stored(obj: Any) -> StoredState:
    metadata = as_mapping(as_mapping(obj).get("metadata"))
    owners = tuple(as_mapping(ref) for ref in metadata.get("ownerReferences") or [])
    return StoredState(as_mapping(as_mapping(obj).get("spec")), owners, str(metadata.get("resourceVersion") or ""))


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A Node as the cluster view needs it: its name and its owned labels (all others dropped)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def list_nodes(api_client: client.ApiClient) -> list[NodeSummary]:
    """Every Node, sorted by name, with only the owned labels. Blocking; KubeError naming the failure."""
    core = CoreCalls(api_client)
    nodes: list[NodeSummary] = []
    for item in list_pages(core.list_node, "listing nodes failed", _LIST_TIMEOUT):
        name = as_mapping(item.get("metadata")).get("name")
        if isinstance(name, str) and name:
            nodes.append(NodeSummary(name, owned_fields(item).labels))
    return sorted(nodes, key=lambda node: node.name)


def list_node_states(api_client: client.ApiClient) -> list[Mapping[str, Any]]:
    """Every FpgaNodeState object as the API server sends it (JSON). Blocking; KubeError naming the failure."""
    core = CoreCalls(api_client)
    return list(
        list_pages(core.list_fpga_node_state_for_all_namespaces, "listing FpgaNodeState objects failed", _LIST_TIMEOUT)
    )


def list_resource_claims(api_client: client.ApiClient) -> list[Mapping[str, Any]]:
    """Every ResourceClaim as the API server sends it (JSON), for what their slots hold. Blocking; KubeError."""
    core = CoreCalls(api_client)
    return list(list_pages(core.list_resource_claim_for_all_namespaces, "listing ResourceClaims failed", _LIST_TIMEOUT))

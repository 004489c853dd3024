"""This node's FpgaNodeState object: read, written whole when its spec changes, deleted on uninstall.

Blocking calls, for a worker thread. The object is owned by the agent's DaemonSet, so the garbage
collector removes it with the install. The schema is ``agent.slots.published``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from agent.kube.client import api_status
from agent.kube.core import CoreCalls
from agent.kube.nodefields import as_mapping
from agent.kube.reflector import CONNECT_TIMEOUT_S
from agent.slots.published import state_object

logger = logging.getLogger(__name__)

FIELD_MANAGER = "fpga-slot"


@dataclass(frozen=True, slots=True)
class StoredState:
    """The object as the API server showed it last: its spec, owners and resourceVersion."""

    spec: Mapping[str, Any]
    owners: tuple[Mapping[str, Any], ...]
    resource_version: str


class StateObjects:
    """The requests on this node's FpgaNodeState (and the agent's own pod, for its owner). Blocking."""

    def __init__(self, api_client: ApiClient, node: str, namespace: str, timeout_s: float) -> None:
        self._core = CoreCalls(api_client)
        self.node = node
        self.namespace = namespace
        self._timeout = (CONNECT_TIMEOUT_S, timeout_s)

    def daemonset_owner(self, pod_name: str) -> dict[str, Any] | None:
        """The ownerReference of the DaemonSet that runs the agent's pod; None outside a DaemonSet's pod."""
        if not pod_name:
            return None
        try:
            pod = self._core.read_namespaced_pod(pod_name, self.namespace, _request_timeout=self._timeout)
        except Exception as exc:
            if api_status(exc) == 404:
                logger.warning(
                    "the agent's pod %s/%s is not there: its node's FpgaNodeState gets no owner",
                    self.namespace,
                    pod_name,
                )
                return None
            raise
        for ref in as_mapping(pod.get("metadata")).get("ownerReferences") or []:
            ref = as_mapping(ref)
            if ref.get("kind") == "DaemonSet" and ref.get("controller") and ref.get("uid"):
                return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ref.get("name"), "uid": ref.get("uid")}
        return None

    def read(self) -> StoredState | None:
        """The node's object, or None when there is none."""
        try:
            obj = self._core.read_namespaced_fpga_node_state(self.node, self.namespace, _request_timeout=self._timeout)
        except Exception as exc:
            if api_status(exc) == 404:
                return None
            raise
        return _stored(obj)

    def write(
        self, spec: Mapping[str, Any], owner: Mapping[str, Any] | None, current: StoredState | None
    ) -> StoredState:
        """Create the object, or replace the one read as ``current`` (a 409 if it changed since: read it again)."""
        body = state_object(self.node, self.namespace, spec, owner)
        if current is None:
            obj = self._core.create_namespaced_fpga_node_state(
                self.namespace, body, field_manager=FIELD_MANAGER, _request_timeout=self._timeout
            )
        else:
            body["metadata"]["resourceVersion"] = current.resource_version
            obj = self._core.replace_namespaced_fpga_node_state(
                self.node, self.namespace, body, field_manager=FIELD_MANAGER, _request_timeout=self._timeout
            )
        return _stored(obj)

    def delete(self) -> bool:
        """Delete the node's object; False when there was none."""
        try:
            self._core.delete_namespaced_fpga_node_state(self.node, self.namespace, _request_timeout=self._timeout)
        except Exception as exc:
            if api_status(exc) == 404:
                return False
            raise
        return True


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

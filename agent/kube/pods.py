"""This node's pods, kept current by one list+watch (``fieldSelector=spec.nodeName=<node>``), each a small frozen
value parsed once from the API's JSON (tolerant: unset fields are absent in JSON, so every field has a neutral default).

The pods live on the event loop and are only touched there. Listeners hear ADDED, MODIFIED and DELETED,
also for the differences a relist finds; MODIFIED only when something in :class:`PodInfo` changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kubernetes import client

from agent.kube.core import CoreCalls
from agent.kube.nodefields import as_mapping
from agent.kube.reflector import DEFAULT_BACKOFF, Backoff, Reflector, WatchEventKind, waited
from agent.slots.bitstreamrequest import SLOT_RESOURCE, slots_asked

logger = logging.getLogger(__name__)

PodKey = tuple[str, str]


class ContainerSlots(NamedTuple):
    """One container and the number of slots it asks for (0 when it asks for none)."""

    name: str
    slots: int


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The part of a Pod the agent uses. ``deleted`` is set on the last state of a removed pod."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    created: float
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    containers: tuple[ContainerSlots, ...] = ()
    deleted: bool = False
    init_containers: tuple[ContainerSlots, ...] = ()
    #: For a pod given slots through DRA's extended-resource bridge: the request of the claim the scheduler
    #: made -> the container it serves (``status.extendedResourceClaimStatus.requestMappings``).
    request_containers: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    def as_deleted(self) -> PodInfo:
        return dataclasses.replace(self, deleted=True)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_timestamp(value: object) -> float:
    """An RFC 3339 time (``2024-05-01T10:00:00Z``) as seconds since the epoch; 0.0 when unset or bad."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _containers(value: object) -> tuple[ContainerSlots, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(ContainerSlots(str(c.get("name", "")), slots_asked(c)) for c in value if isinstance(c, Mapping))


def parse_pod(obj: Mapping[str, Any], *, deleted: bool = False) -> PodInfo:
    """The PodInfo of a Pod as the API sends it (JSON, camelCase); ValueError when it has no name."""
    meta = as_mapping(obj.get("metadata"))
    spec = as_mapping(obj.get("spec"))
    status = as_mapping(obj.get("status"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    annotations = {
        str(key): value for key, value in as_mapping(meta.get("annotations")).items() if isinstance(value, str)
    }
    return PodInfo(
        namespace=str(meta.get("namespace") or ""),
        name=name,
        uid=str(meta.get("uid") or ""),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        created=parse_timestamp(meta.get("creationTimestamp")),
        annotations=types.MappingProxyType(annotations),
        containers=_containers(spec.get("containers")),
        deleted=deleted,
        init_containers=_containers(spec.get("initContainers")),
        request_containers=types.MappingProxyType(_request_containers(status)),
    )


def _request_containers(status: Mapping[str, Any]) -> dict[str, str]:
    found = {}
    for mapping in as_mapping(status.get("extendedResourceClaimStatus")).get("requestMappings") or []:
        mapping = as_mapping(mapping)
        request, container = mapping.get("requestName"), mapping.get("containerName")
        if mapping.get("resourceName") == SLOT_RESOURCE and isinstance(request, str) and isinstance(container, str):
            found[request] = container
    return found


PodListener = Callable[[WatchEventKind, PodInfo], None]


class PodCache(Reflector[PodInfo]):
    """The pods bound to ``node_name``, with change callbacks. Run ``run()`` as a task; call the rest on its loop."""

    def __init__(self, api_client: client.ApiClient, node_name: str, *, backoff: Backoff = DEFAULT_BACKOFF) -> None:
        self.node_name = node_name
        core = CoreCalls(api_client)
        super().__init__(
            name=f"pods-{node_name}",
            description=f"pods on node {node_name}",
            list_func=core.list_pod_for_all_namespaces,
            list_kwargs={"field_selector": f"spec.nodeName={node_name}"},
            parse=parse_pod,
            on_replace=self._replace,
            on_event=self._apply,
            backoff=backoff,
        )
        self._pods: dict[PodKey, PodInfo] = {}
        self._listeners: list[PodListener] = []
        #: True once the first list arrived (and from then on, also while relisting).
        self.synced = False

    def get(self, namespace: str, name: str) -> PodInfo | None:
        return self._pods.get((namespace, name))

    def pods(self) -> list[PodInfo]:
        """Every pod currently bound to this node (a new list; the values are frozen)."""
        return list(self._pods.values())

    async def wait_pod(self, namespace: str, name: str, timeout_s: float) -> PodInfo | None:
        """The pod, waiting up to ``timeout_s`` for it to arrive through the watch; None if it does not."""
        key = (namespace, name)
        if key not in self._pods:  # the common case needs no wait, and no list of the node's pods
            await self.wait_until(lambda _pods: key in self._pods, timeout_s)
        return self._pods.get(key)

    async def wait_until(self, predicate: Callable[[list[PodInfo]], bool], timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until ``predicate(pods)`` holds (checked on every change); whether it does."""
        if predicate(self.pods()):
            return True
        changed = asyncio.Event()

        def wake(_kind: WatchEventKind, _pod: PodInfo) -> None:
            changed.set()

        async def holds() -> None:
            while not predicate(self.pods()):
                changed.clear()
                await changed.wait()

        self.add_listener(wake)
        try:
            return await waited(holds(), timeout_s)
        finally:
            self.remove_listener(wake)

    def add_listener(self, listener: PodListener) -> None:
        """Call ``listener(kind, pod)`` on the loop for every change; exceptions are logged, not raised."""
        self._listeners.append(listener)

    def remove_listener(self, listener: PodListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # --- called on the loop by the list+watch ----------------------------------------------

    def _replace(self, pods: list[PodInfo]) -> None:
        fresh = {pod.key: pod for pod in pods}
        old = self._pods
        self._pods = fresh
        first = not self.synced
        self.synced = True
        if first:
            logger.info("pod cache for node %s synced: %d pods", self.node_name, len(fresh))
        for key, pod in old.items():
            current = fresh.get(key)
            if current is None or current.uid != pod.uid:
                self._notify("DELETED", pod.as_deleted())
        for key, pod in fresh.items():
            previous = old.get(key)
            if previous is None or previous.uid != pod.uid:
                self._notify("ADDED", pod)
            elif previous != pod:
                self._notify("MODIFIED", pod)

    def _apply(self, kind: WatchEventKind, pod: PodInfo) -> None:
        key = pod.key
        previous = self._pods.get(key)
        if kind == "DELETED":
            if previous is not None and previous.uid == pod.uid:
                del self._pods[key]
                self._notify("DELETED", pod.as_deleted())
            return
        self._pods[key] = pod
        if previous is None:
            self._notify("ADDED", pod)
        elif previous.uid != pod.uid:  # a new pod of the same name; the old one's DELETED was missed
            self._notify("DELETED", previous.as_deleted())
            self._notify("ADDED", pod)
        elif previous != pod:
            self._notify("MODIFIED", pod)

    def _notify(self, kind: WatchEventKind, pod: PodInfo) -> None:
        for listener in list(self._listeners):
            try:
                listener(kind, pod)
            except Exception:
                logger.exception("pod listener failed on %s of pod %s", kind, pod)

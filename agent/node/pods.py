"""How the programming pipeline sees pods, containers and events: small interfaces.

The pipeline (``agent.node.reconfigure``, ``agent.node.slotloader``) reads pods from the
node's watch-fed cache (``agent.kube``), asks the kubelet's pod-resources which container
holds which slots (``agent.deviceplugin``) and posts Events; each through one of these
protocols, so that the core imports none of those adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol


class PodView(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def created(self) -> float: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def containers(self) -> Sequence[tuple[str, int]]: ...


class PodDirectory(Protocol):
    """This node's pods as the API server knows them (a watch-fed cache)."""

    def get(self, namespace: str, name: str) -> PodView | None: ...
    def pods(self) -> Sequence[PodView]: ...
    async def wait_pod(self, namespace: str, name: str, timeout_s: float) -> PodView | None: ...
    async def wait_until(self, predicate: Callable[[list[Any]], bool], timeout_s: float) -> bool: ...


class EventSink(Protocol):
    async def post(
        self, namespace: str, pod_name: str, pod_uid: str, reason: str, message: str, type: str = "Normal"
    ) -> None: ...


class ContainerFinder(Protocol):
    async def find_container(self, device_ids: Sequence[str]) -> ContainerRefLike | None: ...
    async def list_containers(self) -> Sequence[ContainerRefLike]: ...


class ContainerRefLike(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...
    @property
    def container(self) -> str: ...
    @property
    def device_ids(self) -> frozenset[str]: ...

"""This node's pods and the Events the agent posts about them, in memory, for the demo (no API server)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class StandInPod:
    """A pod as the agent reads it: identity, phase, annotations, slot requests per container."""

    namespace: str
    name: str
    uid: str
    phase: str
    created: float
    annotations: dict[str, str] = field(default_factory=dict)
    containers: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PostedEvent:
    namespace: str
    pod: str
    reason: str
    message: str
    type: str


class NodePods:
    """The node's pods and the Events posted about them."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], StandInPod] = {}
        self.events: list[PostedEvent] = []
        self._order = itertools.count()

    def add(
        self, namespace: str, name: str, containers: dict[str, int], annotations: dict[str, str] | None = None
    ) -> StandInPod:
        """A pod scheduled to this node, not started yet (phase Pending)."""
        pod = StandInPod(
            namespace=namespace,
            name=name,
            uid=str(uuid.uuid4()),
            phase="Pending",
            created=time.time() + next(self._order) * 1e-6,
            annotations=dict(annotations or {}),
            containers=tuple(containers.items()),
        )
        self._pods[(namespace, name)] = pod
        return pod

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        key = (namespace, name)
        self._pods[key] = replace(self._pods[key], phase=phase)

    def delete(self, namespace: str, name: str) -> None:
        self._pods.pop((namespace, name), None)

    # PodDirectory
    def get(self, namespace: str, name: str) -> StandInPod | None:
        return self._pods.get((namespace, name))

    def pods(self) -> list[StandInPod]:
        return list(self._pods.values())

    async def wait_pod(self, namespace: str, name: str, timeout_s: float) -> StandInPod | None:
        """Pods are known here the moment they are added: nothing to wait for."""
        return self._pods.get((namespace, name))

    async def wait_until(self, predicate: Callable[[list[StandInPod]], bool], timeout_s: float) -> bool:
        """Pods are known here the moment they are added: the answer is now."""
        return predicate(self.pods())

    # EventSink
    async def post(
        self, namespace: str, pod_name: str, pod_uid: str, reason: str, message: str, type: str = "Normal"
    ) -> None:
        self.events.append(PostedEvent(namespace, pod_name, reason, message, type))

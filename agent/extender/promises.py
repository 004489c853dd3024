"""Free copies promised to pods the scheduler is placing, so that one copy is not offered to two pods.

For other pods a promised copy is not there. A promise ends when its node publishes a new state,
when the same pod is asked about again, or after ``PROMISE_TTL_S``; at most ``MAX_PROMISES``
(oldest dropped first). Why: docs/placement-at-scale.md.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from agent.extender.nodestate import NodeSlots

PROMISE_TTL_S = 15.0
MAX_PROMISES = 10_000
#: Pod and node names are at most 317 and 253 characters.
MAX_KEY_CHARS = 320


class Promise(NamedTuple):
    bitstream: str
    node: str
    expires: float


class _Held(NamedTuple):
    """The promises on one node for one bitstream, and the node's state they were made on (a new one ends them)."""

    state: NodeSlots
    pods: set[str]


class Promises:
    """Pod -> the copy promised to it; the promises held per (bitstream, node)."""

    def __init__(self, limit: int = MAX_PROMISES, ttl_s: float = PROMISE_TTL_S) -> None:
        self._limit = limit
        self._ttl_s = ttl_s
        #: Pod -> its promise, oldest first.
        self._by_pod: OrderedDict[str, Promise] = OrderedDict()
        #: Bitstream -> node -> the promises held there.
        self._held: dict[str, dict[str, _Held]] = {}

    def __len__(self) -> int:
        return len(self._by_pod)

    def taken(
        self, pod: str, bitstream: str, nodes: Mapping[str, NodeSlots], now: float, asked: AbstractSet[str]
    ) -> dict[str, int]:
        """Node -> copies of ``bitstream`` promised to pods other than ``pod``, for the nodes ``asked``; first
        releases ``pod``'s own promise (it was not placed), expired ones, and those on a node with a new state."""
        self.release(pod)
        self._expire(now)
        held = self._held.get(bitstream)
        if not held:
            return {}
        taken: dict[str, int] = {}
        for node in held.keys() & asked:
            entry = held[node]
            if nodes.get(node) is entry.state:
                taken[node] = len(entry.pods)
            else:
                for other in list(entry.pods):
                    self.release(other)
        return taken

    def promise(self, pod: str, bitstream: str, node: str, nodes: Mapping[str, NodeSlots], now: float) -> None:
        """Promise one free copy of ``bitstream`` on ``node`` (in its current state) to ``pod``."""
        if len(pod) > MAX_KEY_CHARS or len(node) > MAX_KEY_CHARS:
            return
        self.release(pod)
        if len(self._by_pod) >= self._limit:  # full: first the promises that ended with a new state
            for per_node in list(self._held.values()):
                for name, held in list(per_node.items()):
                    if nodes.get(name) is not held.state:
                        for other in list(held.pods):
                            self.release(other)
        while len(self._by_pod) >= self._limit:
            self.release(next(iter(self._by_pod)))
        state = nodes[node]
        entry = self._held.get(bitstream, {}).get(node)
        if entry is not None and entry.state is not state:  # made on an older state: they ended with it
            for other in list(entry.pods):
                self.release(other)
            entry = None
        if entry is None:
            entry = self._held.setdefault(bitstream, {})[node] = _Held(state, set())
        entry.pods.add(pod)
        self._by_pod[pod] = Promise(bitstream, node, now + self._ttl_s)

    def release(self, pod: str) -> None:
        promise = self._by_pod.pop(pod, None)
        if promise is None:
            return
        per_node = self._held[promise.bitstream]
        entry = per_node[promise.node]
        entry.pods.discard(pod)
        if not entry.pods:
            del per_node[promise.node]
            if not per_node:
                del self._held[promise.bitstream]

    def _expire(self, now: float) -> None:
        by_pod = self._by_pod
        while by_pod:
            pod, promise = next(iter(by_pod.items()))
            if promise.expires > now:
                return
            self.release(pod)

"""Free copies promised to pods the scheduler is placing, so that one copy is not offered to two pods.

A node publishes that a free slot holds a bitstream; the extender scores it best for
the next pod that wants it, and the scheduler binds the pod there. The node's agent
learns that the slot is taken only when the kubelet admits the pod, and publishes it
a moment later: until then the copy still looks free, and a burst of pods of one
bitstream (the replicas of a Deployment) is sent to the same node, each one scored as
a hit while only the first can have it. With the profile's MostAllocated packing this
is systematic, as the scheduler counts the pods it placed there and prefers that node
over every other node holding a copy (measured at 5000 nodes: 21 % of the pods that
could have found a free copy missed it, ``bench/placement_scale.py``).

So for a one-slot pod whose answer tops with a node holding a free copy:

* one node keeps the top score alone (of the nodes that tie for the top by score and
  packing, where the scheduler would pick at random, one chosen by the pod's name);
  other nodes at the same score get one point less, so the scheduler takes the chosen
  node, whatever its own count of pods it placed but the nodes have not published yet adds;
* the copy is **promised** to the pod: for later pods, a node whose free copies of the
  bitstream are all promised is scored as if it held none (``OneSlotIndex``'s hits
  leave it out);
* a DRA pod (``agent.extender.drascoring``) is scored with the promised copies taken off
  each node's free slots, and a one-slot DRA pod is promised a copy like any one-slot pod;
* a promise ends when the node publishes a new state (the agent saw the slot taken,
  or anything else changed: its state is then current again), when the same pod is
  asked about again (the scheduler retries it: its old promise is replaced), or after
  ``PROMISE_TTL_S`` (the scheduler chose another node after all, or the pod never
  reached the node).
"""

from __future__ import annotations

import math
import zlib
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from agent.extender.nodestate import NodeSlots
from agent.extender.sample import HashedNames
from agent.extender.scoretable import ChangeLog, Scores

_NONE: frozenset[str] = frozenset()
#: How long a promise holds at most: admission on the node and the agent's publishing come well within it.
PROMISE_TTL_S = 15.0


class _Promise(NamedTuple):  # made on every call that promises: a tuple is made in 0.22 us, a frozen dataclass 0.39
    bitstream: str
    node: str
    expires: float


class FastBooks(NamedTuple):
    """What ``FastPath.keep`` takes of the promises (:meth:`Promises.fast_books`), in this order."""

    promises: Promises
    by_pod: OrderedDict[str, _Promise]
    on_node: dict[str, set[str]]
    taken: dict[str, dict[str, int]]
    full: dict[str, HashedNames]
    reshaped: set[str]
    promise_type: type[tuple[str, str, float]]
    ttl: float
    record: Callable[[str, str, str, float], None]


def free_copies(node: NodeSlots, bitstream: str) -> int:
    """The node's free healthy slots holding ``bitstream`` (any platform), as published."""
    return node.free_held.get(bitstream, 0)


class Promises:
    """The promises of one score board; follows its node cache's change log."""

    def __init__(self) -> None:
        #: Pod -> its promise, oldest first (a pod asked again is put last). An OrderedDict: the oldest is found
        #: in constant time on every call (a dict walks past every entry deleted from its front).
        self._by_pod: OrderedDict[str, _Promise] = OrderedDict()
        #: Bitstream -> node -> copies promised there.
        self._taken: dict[str, dict[str, int]] = {}
        #: Node -> the pods promised a copy there.
        self._on_node: dict[str, set[str]] = {}
        #: Bitstream -> the nodes whose every free copy of it is promised (kept with each promise made or ended:
        #: a node's free copies change only with a new state, which ends its promises).
        self._full: dict[str, HashedNames] = {}
        self._cache: ChangeLog | None = None
        self._generation = -1
        self._seen = 0
        #: The promise the last answer made, with its cache and pod, not recorded yet (``record``).
        self._pending: tuple[ChangeLog, str, _Promise] | None = None
        #: Bitstreams whose table of fully promised nodes was made or dropped since ``take_reshaped`` (the
        #: compiled fast path holds those tables: ``agent.extender.fastpath``).
        self._reshaped: set[str] = set()

    @property
    def pods(self) -> Mapping[str, object]:
        """The pods with a promise (a pod asked about again has its promise released first)."""
        return self._by_pod

    def fast_books(self, record: Callable[[str, str, str, float], None]) -> FastBooks:
        """The tables the compiled fast path records its promises in (``FastPath.keep``): ``_fastbooks.c`` does
        what :meth:`record` does, and leaves the rare cases to ``record(pod, node, bitstream, now)``: a pending
        promise, reshaped bitstreams not yet taken, a bitstream's first fully promised node. Each table is kept
        in place (emptied, never replaced)."""
        return FastBooks(
            self, self._by_pod, self._on_node, self._taken, self._full, self._reshaped, _Promise, PROMISE_TTL_S, record
        )

    def next_expiry(self) -> float:
        """When the oldest promise ends by itself (infinity when there is none)."""
        by_pod = self._by_pod
        return next(iter(by_pod.values())).expires if by_pod else math.inf

    def take_reshaped(self) -> Collection[str]:
        """The bitstreams whose fully promised nodes' table was made or dropped since the last call."""
        reshaped = self._reshaped
        if not reshaped:  # nearly always: no set made
            return _NONE
        taken = set(reshaped)
        reshaped.clear()  # in place: the compiled fast path reads this set
        return taken

    def promise(self, cache: ChangeLog, pod: str, bitstream: str, node: str, now: float) -> None:
        """Promise a free copy on ``node`` to ``pod`` (the fast path's answer chose it), recorded at once."""
        self.record()
        self._pending = (cache, pod, _Promise(bitstream, node, now + PROMISE_TTL_S))
        self.record()

    def record(self) -> None:
        """Record the promise the last answer made. Called once the answer is written (the scheduler does not
        wait for it), and by every read first: a promise is always recorded before the next call reads."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        cache, pod, promise = pending
        self._by_pod[pod] = promise
        self._on_node.setdefault(promise.node, set()).add(pod)
        per_node = self._taken.setdefault(promise.bitstream, {})
        per_node[promise.node] = count = per_node.get(promise.node, 0) + 1
        chosen_node = cache.nodes.get(promise.node)
        if chosen_node is None or free_copies(chosen_node, promise.bitstream) <= count:
            full = self._full.get(promise.bitstream)
            if full is None:
                full = self._full[promise.bitstream] = HashedNames()
                self._reshaped.add(promise.bitstream)
            full.add(promise.node)

    def taken(self, cache: ChangeLog, bitstream: str, now: float) -> Mapping[str, int]:
        """Node -> copies of ``bitstream`` promised there, current with the cache and the clock."""
        self.record()
        self._follow(cache, now)
        return self._taken.get(bitstream, {})

    def promised(self, cache: ChangeLog, pod: str, bitstream: str, now: float) -> Mapping[str, int]:
        """Node -> copies of ``bitstream`` promised there to pods other than ``pod`` (a DRA pod's scoring takes
        them off the node's free slots, ``agent.extender.drascoring``); read only, and current until the next call."""
        self.record()
        self._release(pod)  # asked again (the scheduler retries it): its old promise no longer holds
        return self.taken(cache, bitstream, now)

    def shadowed(self, cache: ChangeLog, pod: str, bitstream: str, now: float) -> Collection[str]:
        """Nodes whose every free copy of ``bitstream`` is promised to pods other than ``pod`` (read only)."""
        if self._pending is not None:
            self.record()
        if pod in self._by_pod:  # asked again (the scheduler retries it): its old promise no longer holds
            self._release(pod)
        self._follow(cache, now)
        return self._full.get(bitstream, _NONE)

    def settle(
        self, cache: ChangeLog, pod: str, bitstream: str, answer: Scores, now: float, tied: Sequence[str] | None = None
    ) -> Scores:
        """The answer with its top made unique and promised to ``pod``, when a node holding a free copy tops it.

        ``answer`` lists the best nodes first (``best_ranked``), with nodes whose copies are all
        promised already scored without them. ``tied``: the leading names that tie for the top (same score,
        same packing), when the caller knows them (the one-slot index does); else found here.
        """
        self.record()
        self._release(pod)
        if not answer or not self._unpromised(cache, answer[0][0], bitstream):
            return answer
        nodes, first = cache.nodes, cache.nodes[answer[0][0]]
        top_score = answer[0][1]
        # The nodes the scheduler would choose among at random (same score, same packing): one of them,
        # spread by the pod's name as the scheduler's random pick would spread them, not always the first.
        if tied is None:
            packing = first.packing(1)
            tied = [
                name
                for name, score in answer
                if score == top_score and (node := nodes.get(name)) is not None and node.packing(1) == packing
            ]
        # by name: the same node whichever order the caller found them in
        chosen = sorted(tied)[zlib.crc32(pod.encode()) % len(tied)]
        self._pending = (cache, pod, _Promise(bitstream, chosen, now + PROMISE_TTL_S))  # recorded by ``record``
        lower = top_score - 1
        settled = [(name, lower if score == top_score and name != chosen else score) for name, score in answer]
        return settled if lower > 0 else [entry for entry in settled if entry[1] > 0]

    def settle_encoded(
        self, cache: ChangeLog, pod: str, bitstream: str, now: float, made: tuple[bytes, str | None, str | None, bytes]
    ) -> bytes:
        """:meth:`settle` for an answer the compiled reader made (``sample.answer``: plain, first, chosen,
        settled), after :meth:`shadowed` in the same call: the settled answer, and ``chosen`` promised, when
        ``first`` has a free copy no other pod was promised; else the plain one."""
        plain, first, chosen, settled = made
        if first is None or chosen is None or not self._unpromised(cache, first, bitstream):
            return plain
        self._pending = (cache, pod, _Promise(bitstream, chosen, now + PROMISE_TTL_S))  # recorded by ``record``
        return settled

    def _unpromised(self, cache: ChangeLog, name: str, bitstream: str) -> bool:
        """Whether the node has a free copy of ``bitstream`` that is promised to no pod."""
        node = cache.nodes.get(name)
        return node is not None and free_copies(node, bitstream) > self._taken.get(bitstream, {}).get(name, 0)

    def _follow(self, cache: ChangeLog, now: float) -> None:
        by_pod = self._by_pod
        if (  # nothing to follow: the same cache, no node changed, the oldest promise still holds
            cache is self._cache
            and cache.generation == self._generation
            and self._seen == len(cache.changes)
            and (not by_pod or next(iter(by_pod.values())).expires > now)
        ):
            return
        if cache is not self._cache or cache.generation != self._generation:
            self._cache, self._generation, self._seen = cache, cache.generation, len(cache.changes)
            self._by_pod.clear()
            self._taken.clear()
            self._on_node.clear()
            self._reshaped.update(self._full)
            self._full.clear()
            return
        changes = cache.changes
        if self._seen < len(changes):
            changed = set(changes[self._seen :])
            self._seen = len(changes)
            for name in changed.intersection(self._on_node):
                for pod in list(self._on_node[name]):
                    self._release(pod)
        while self._by_pod:
            pod, promise = next(iter(self._by_pod.items()))  # the oldest: constant time in an OrderedDict
            if promise.expires > now:
                break
            self._release(pod)

    def _release(self, pod: str) -> None:
        promise = self._by_pod.pop(pod, None)
        if promise is None:
            return
        pods = self._on_node[promise.node]
        pods.discard(pod)
        if not pods:
            del self._on_node[promise.node]
        per_node = self._taken[promise.bitstream]
        per_node[promise.node] -= 1
        full = self._full.get(promise.bitstream)
        if full is not None and promise.node in full:  # one copy is free again (all promises there end together
            full.discard(promise.node)  # when the node republishes: this is a pod asked again or one timed out)
            if not full:
                del self._full[promise.bitstream]
                self._reshaped.add(promise.bitstream)
        if not per_node[promise.node]:
            del per_node[promise.node]
            if not per_node:
                del self._taken[promise.bitstream]

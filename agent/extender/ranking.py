"""Prioritize: score every name asked, rank, cut the answer, promise the copy it offers.

A node's rank is its score and its packing (``NodeSlots.packing``) as one integer. See docs/scoring.md."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, repeat
from typing import Protocol

from agent.extender.demand import PodDemand
from agent.extender.drascoring import DRA_ANSWER_LIMIT, score_dra
from agent.extender.nodestate import NodeSlots
from agent.extender.promises import Promises
from agent.extender.scoring import MAX_SCORE, NO_VALUES, ScoreWeights, one_slot_score, score_node
from agent.extender.table import StateTable

#: Entries a prioritize answer lists at most: the nodes kube-scheduler will choose among (0: every one).
ANSWER_LIMIT = 16
#: A node's rank as one integer: its score times this, plus its packing (0..100, below this).
RANK_SCALE = 128
#: Every rank as one shared int object (what the state table's memo keeps is then a reference).
RANK_CODES = tuple(range((MAX_SCORE + 1) * RANK_SCALE))

Scores = list[tuple[str, int]]


class NodeView(Protocol):
    """The nodes a call is answered from (structurally: the state table, or a request's own Node objects)."""

    @property
    def nodes(self) -> Mapping[str, NodeSlots]: ...


#: A caller's value (0..1) of keeping a free copy of each bitstream (the cluster simulation's; the extender has none).
ClusterValues = Callable[[Iterable[NodeSlots], float], Mapping[str, float]]


class Scorer:
    """Prioritize over a node view, with the promises of this extender."""

    def __init__(
        self,
        weights: ScoreWeights,
        limit: int = ANSWER_LIMIT,
        *,
        promises: bool = True,
        values: ClusterValues | None = None,
    ) -> None:
        self.weights = weights
        self.limit = limit
        self.promises: Promises | None = Promises() if promises else None
        self.values = values

    def prioritize(self, view: NodeView, demand: PodDemand, names: Sequence[str], now: float) -> Scores:
        """The answer for ``names``: :func:`best_ranked` of their ranks, its top :func:`settle`-d."""
        if not demand.by_bitstream:
            return []  # neutral everywhere: nothing stands out
        nodes, weights = view.nodes, self.weights
        keep = self.values(nodes.values(), now) if self.values is not None else NO_VALUES
        one_slot = demand.one_slot
        promises = self.promises if one_slot is not None else None
        asked = set(names)
        if len(asked) != len(names):
            names = list(dict.fromkeys(names))  # each once: an answer must not list a node twice
        taken = promises.taken(demand.pod, one_slot, nodes, now, asked) if promises is not None and one_slot else {}
        if one_slot is not None and demand.dra is None and not keep:
            ranks = one_slot_ranks(one_slot, names, asked, view, weights, now, taken)
        else:
            ranks = node_ranks(demand, names, view, weights, now, keep, taken)
        if demand.dra is not None:  # the allocator, not a scheduler plugin, packs: one node, best packed
            limit = DRA_ANSWER_LIMIT if self.limit <= 0 else min(self.limit, DRA_ANSWER_LIMIT)
            answer = best_ranked(names, ranks, limit, pack_ties=True)
        else:
            answer = best_ranked(names, ranks, self.limit)
        if promises is None or one_slot is None or not answer:
            return answer
        return settle(promises, demand.pod, one_slot, answer, nodes, taken, now)


def node_ranks(
    demand: PodDemand,
    names: Sequence[str],
    view: NodeView,
    weights: ScoreWeights,
    now: float,
    keep: Mapping[str, float],
    taken: Mapping[str, int],
) -> list[int]:
    """Each name's rank (``score_node`` or ``score_dra``, and packing); neutral without published state."""
    nodes, neutral = view.nodes, weights.neutral * RANK_SCALE
    score = score_dra if demand.dra is not None else score_node
    count = demand.requested
    ranks: list[int] = []
    for name in names:
        node = nodes.get(name)
        if node is not None:
            ranks.append(score(demand, node, weights, now, keep, taken.get(name, 0)) * RANK_SCALE + node.packing(count))
        else:  # no published state (no agent, or a malformed one)
            ranks.append(neutral)
    return ranks


def one_slot_ranks(
    bitstream: str,
    names: Sequence[str],
    asked: set[str],
    view: NodeView,
    weights: ScoreWeights,
    now: float,
    taken: Mapping[str, int],
) -> list[int]:
    """:func:`node_ranks` for a pod asking one slot of ``bitstream`` (nearly every pod; ``asked``: the names as a
    set, ``taken``: promised copies on some of them). The state table's memo keeps each node's rank for a
    bitstream some node can program while the node's state lasts, unless the rank moves with time."""
    memo = view.memo if isinstance(view, StateTable) and view.bitstream_known(bitstream) else None
    key = (weights, bitstream)
    known = memo.values(key, now) if memo is not None else {}
    before, nodes = len(known), view.nodes
    here: dict[str, int] = {}  # ranks for this call only: never in the memo
    try:
        for name in asked.difference(known):  # not asked - known.keys(): that walks every key kept
            node = nodes.get(name)
            if node is None:  # no published state: neutral
                here[name] = weights.neutral * RANK_SCALE
                continue
            rank, lasting = _one_slot_rank(node, bitstream, weights, now)
            if not lasting:
                here[name] = rank
            else:  # under the state's own name object, which every bitstream's entries share
                known[node.name if node.name == name else name] = rank
    finally:
        if memo is not None:
            memo.added(key, len(known) - before)
    for name, promised in taken.items():  # copies promised to other pods: what is left of them
        here[name] = _one_slot_rank(nodes[name], bitstream, weights, now, promised)[0]
    ranks = list(map(known.get, names, repeat(0)))
    for at in compress(range(len(names)), map(here.__contains__, names)):
        ranks[at] = here[names[at]]
    return ranks


def _one_slot_rank(
    node: NodeSlots, bitstream: str, weights: ScoreWeights, now: float, promised: int = 0
) -> tuple[int, bool]:
    """:func:`one_slot_score` and packing as one rank, and whether it lasts as long as the node's state."""
    score, lasting = one_slot_score(bitstream, node, weights, now, NO_VALUES, promised)
    return RANK_CODES[score * RANK_SCALE + node.pack1], lasting and not promised


def settle(
    promises: Promises,
    pod: str,
    bitstream: str,
    answer: Scores,
    nodes: Mapping[str, NodeSlots],
    taken: Mapping[str, int],
    now: float,
) -> Scores:
    """The answer with its top made unique and promised to ``pod`` when a top node has an unpromised free copy:
    one such node chosen by the pod's name; the others at the top score get one point less."""

    def rank(name: str, score: int) -> int:  # the order of the ranks the answer was cut from
        node = nodes.get(name)
        return score * RANK_SCALE + (node.pack1 if node is not None else 0)

    def has_copy(name: str) -> bool:
        node = nodes.get(name)
        if node is None:
            return False
        platform = node.bitstreams.get(bitstream)
        return platform is not None and node.free_loaded.get((bitstream, platform), 0) > taken.get(name, 0)

    top = max(rank(name, score) for name, score in answer)
    tied = sorted(name for name, score in answer if rank(name, score) == top and has_copy(name))
    if not tied:
        return answer
    chosen = tied[zlib.crc32(pod.encode(errors="surrogatepass")) % len(tied)]
    promises.promise(pod, bitstream, chosen, nodes, now)
    top_score = top // RANK_SCALE
    lower = top_score - 1
    settled = [(name, lower if score == top_score and name != chosen else score) for name, score in answer]
    return settled if lower > 0 else [entry for entry in settled if entry[1] > 0]


def best_ranked(names: Sequence[str], ranks: list[int], limit: int, *, pack_ties: bool = False) -> Scores:
    """Scores shifted to the floor, the floor left out, at most ``limit`` entries (0: all), best rank first, ties
    in the order asked. ``pack_ties``: when all score the floor but packings differ, the best packed get 1."""
    if not ranks:
        return []
    order = sorted(set(ranks), reverse=True)  # few: scores x packings
    floor = order[-1] // RANK_SCALE
    top = (floor + 1) * RANK_SCALE  # the lowest rank that stands out
    if pack_ties and order[0] < top and order[0] != order[-1]:
        floor, top = floor - 1, order[0]
        order = order[:1]
    if limit <= 0:
        return [(name, rank // RANK_SCALE - floor) for name, rank in zip(names, ranks, strict=True) if rank >= top]
    picked: Scores = []
    for rank in order:
        if rank < top or len(picked) >= limit:
            break
        score, at = rank // RANK_SCALE - floor, -1
        while len(picked) < limit:
            try:
                at = ranks.index(rank, at + 1)
            except ValueError:
                break
            picked.append((names[at], score))
    return picked

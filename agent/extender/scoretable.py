"""Ranks and the answer made of them: what the score board and the one-slot index share.

A node's **rank** for a pod is its score and its packing as one integer (``score *
RANK_SCALE + packing``; packing is the MostAllocated score of its slots with the pod's
own counted, ``NodeSlots.packing``). The score board (:mod:`agent.extender.ranking`)
keeps the ranks of the nodes asked about per kind of pod (:class:`ScoreTable`), the
one-slot index (:mod:`agent.extender.oneslot`) per platform, and both answer with
:func:`best_ranked`: kube-scheduler counts a node missing from a prioritize answer as
0, so the lowest score among the names asked becomes 0 and is left out, and of the
nodes above it at most ``limit`` are listed, the best by score, then by packing, then
in the order asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

from agent.extender.nodestate import NodeSlots

Scores = list[tuple[str, int]]


class ChangeLog(Protocol):
    """The node cache as the score tables follow it (structurally: :class:`~agent.extender.cache.NodeCache`)."""

    @property
    def nodes(self) -> Mapping[str, NodeSlots]: ...
    @property
    def generation(self) -> int: ...
    @property
    def changes(self) -> Sequence[str]: ...
    @property
    def unpublished(self) -> Set[str]: ...


#: Entries a prioritize answer lists at most (:func:`best_ranked`): the nodes kube-scheduler will choose
#: among. On the workload grid (``bench/cluster_sim.py --grid --answer-limit N``) no limit, 16 and 4 give
#: the same placement within noise (median 1.102, 1.101, 1.101 and worst 1.324, 1.338, 1.332 x the
#: reference); at 5000 nodes an answer of 16 entries instead of ~480 is what keeps the extender's cost near
#: the protocol's (bench/RESULTS.md). 16 rather than fewer leaves the scheduler's own plugins (and its count
#: of free slots, which runs ahead of what the nodes publish) a choice among several good nodes.
ANSWER_LIMIT = 16
#: A node's rank in an answer as one integer: its score times this, plus its packing (0..100, below this).
RANK_SCALE = 128


def ranks_of(scores: Scores, packing: Callable[[str], int]) -> list[int]:
    """Each (name, score)'s rank, in order: for answers scored per call (pods of several bitstreams)."""
    return [score * RANK_SCALE + packing(name) for name, score in scores]


def best_ranked(
    names: Sequence[str], ranks: list[int], limit: int, distinct: set[int] | None = None, *, pack_ties: bool = False
) -> Scores:
    """The answer: each name's score shifted to the floor, the floor left out, at most ``limit`` entries
    (0: all), the best by rank, ties in the order asked. ``ranks`` holds each name's rank, in the order of
    ``names``; ``distinct``, when the caller has it, the set of them. Python steps per entry listed only,
    C-level scans otherwise.

    ``pack_ties`` (DRA pods: no scheduler plugin packs their slots): when every name scores the floor but their
    packings differ, the best packed still stand out, at 1, rather than none (which leaves the scheduler to
    pick at random among them)."""
    if not ranks:
        return []
    order = sorted(set(ranks) if distinct is None else distinct, reverse=True)  # few: scores x packings
    floor = order[-1] // RANK_SCALE
    top = (floor + 1) * RANK_SCALE  # the lowest rank that stands out
    if pack_ties and order[0] < top and order[0] != order[-1]:  # one score, several packings: the best stands out
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


@dataclass(slots=True)
class ScoreTable:
    """The ranks of the nodes asked about so far, for one kind of pod, and what they are current for."""

    generation: int
    #: The version of the cluster's values the ranks are for.
    keep_version: int
    #: The clock step the ranks are for (``volatile`` ones are dropped when it moves on).
    step: int
    #: How many entries of the cache's change log are applied.
    seen: int
    ranks: dict[str, int] = field(default_factory=dict)
    #: Nodes whose rank depends on the clock step (a free slot used within LRU_HORIZON_S).
    volatile: set[str] = field(default_factory=set)

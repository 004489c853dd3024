"""Prioritize answers from scores worked out ahead: the cheap common case by design.

kube-scheduler calls prioritize once per pod with hundreds of node names, inside its
sequential scheduling cycle, while nodes change far more rarely than pods are
scored. So, for each kind of pod that names one bitstream (bitstream, slots, slots
of any content: the replicas of a Deployment are all one kind), a :class:`ScoreTable`
holds the score of every node in the cache, built once per ``CLOCK_STEP_S`` (the
eviction part of a score ages) and kept current from the cache's change log: a
changed node is scored again when the next call of that kind comes, not every node.

A call then costs one dictionary lookup per name, and the answer is **shifted**: the
lowest score among the names asked becomes 0 and every node at that floor is left
out (an omitted node scores 0 for the scheduler). Adding the same constant to every
candidate's score changes no ranking, so the scheduler chooses exactly as with the
unshifted scores, and a 500-name call where most nodes are alike answers only the
handful that stand out. Pods of other kinds (several bitstreams) are scored per call
as before and shifted the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.extender.nodestate import NodeSlots
from agent.extender.scoring import (
    CLOCK_STEP_S,
    MEMO_LIMIT,
    NodeLookup,
    PodDemand,
    ScoreWeights,
    prioritize_nodes,
    score_single,
)

Scores = list[tuple[str, int]]


class ChangeLog(Protocol):
    """The node cache as the score tables follow it (structurally: :class:`~agent.extender.cache.NodeCache`)."""

    @property
    def nodes(self) -> Mapping[str, NodeSlots]: ...
    @property
    def generation(self) -> int: ...
    @property
    def changes(self) -> Sequence[str]: ...


def shift_to_floor(scores: Scores) -> Scores:
    """The same ranking with the lowest score at 0, and the nodes at that floor left out."""
    if not scores:
        return scores
    floor = min(score for _, score in scores)
    return [(name, score - floor) for name, score in scores if score != floor]


@dataclass(slots=True)
class ScoreTable:
    """Every cached node's score for one kind of pod at one clock step."""

    generation: int
    step: int
    #: How many entries of the cache's change log are applied.
    seen: int
    scores: dict[str, int] = field(default_factory=dict)


class ScoreBoard:
    """Prioritize for names from the node cache, with a score table per kind of pod (see the module docstring)."""

    def __init__(self, weights: ScoreWeights) -> None:
        self._weights = weights
        self._cache: ChangeLog | None = None
        self._tables: dict[tuple[str, int, int], ScoreTable] = {}

    def prioritize(
        self, cache: ChangeLog, demand: PodDemand, names: Sequence[str], lookup: NodeLookup, now: float
    ) -> Scores:
        """The shifted scores of ``names`` (in the order asked, floor left out), from ``cache``'s nodes."""
        neutral = self._weights.neutral
        if not demand.by_bitstream:
            return []  # neutral everywhere: nothing stands out
        if demand.single is None:
            return shift_to_floor(prioritize_nodes(demand, names, lookup, self._weights, now))
        if cache is not self._cache:
            self._cache, self._tables = cache, {}
        get = self._table(cache, demand, now).scores.get
        values = [get(name, neutral) for name in names]
        floor = min(values, default=0)
        return [(name, value - floor) for name, value in zip(names, values, strict=True) if value != floor]

    def _table(self, cache: ChangeLog, demand: PodDemand, now: float) -> ScoreTable:
        assert demand.single is not None
        bitstream, count = demand.single
        key = (bitstream, count, demand.unnamed)
        step = int(now // CLOCK_STEP_S)
        table = self._tables.get(key)
        if table is None or table.generation != cache.generation or table.step != step:
            if len(self._tables) >= MEMO_LIMIT:
                self._tables.clear()
            table = ScoreTable(cache.generation, step, len(cache.changes))
            score = self._scorer(demand, step)
            table.scores = {name: score(node) for name, node in cache.nodes.items()}
            self._tables[key] = table
        elif table.seen < len(cache.changes):
            score = self._scorer(demand, step)
            nodes, scores = cache.nodes, table.scores
            for name in cache.changes[table.seen :]:
                node = nodes.get(name)
                if node is None:
                    scores.pop(name, None)  # gone, or no published state: neutral, the default
                else:
                    scores[name] = score(node)
            table.seen = len(cache.changes)
        return table

    def _scorer(self, demand: PodDemand, step: int) -> Callable[[NodeSlots], int]:
        weights, now = self._weights, float(step * CLOCK_STEP_S)
        return lambda node: score_single(demand, node, weights, now)

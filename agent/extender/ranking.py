"""Prioritize answers from scores remembered per kind of pod: the cheap common case by design.

kube-scheduler calls prioritize once per pod with hundreds of node names, inside its
sequential scheduling cycle, while nodes change far more rarely than pods are
scored. A pod that asks one slot of one bitstream (nearly all) is answered by the
:class:`~agent.extender.oneslot.OneSlotIndex`, from per-platform scores that every
bitstream shares, with one pass over the names and no work per node. For the other
kinds of pod that name one bitstream (bitstream, slots, slots of any content: the
replicas of a Deployment are all one kind), a :class:`ScoreTable` remembers the
rank (score and packing, :mod:`agent.extender.scoretable`) of every node a call of
that kind asked about, kept current from the node cache's change log: a changed node
is dropped from the tables and ranked again only when a call asks about it. The
eviction part of a score ages with the clock (read in steps of ``CLOCK_STEP_S``) only
on a node whose free slots were used within ``LRU_HORIZON_S``; those few ranks are
dropped at every step, the rest stay. A kind of pod seen for the first time costs what
scoring its names costs; every later call of that kind, one lookup per name. The
board also keeps the cluster's values (:class:`~agent.extender.facts.ClusterFacts`):
it counts each pod it scores once, and when the values change (at most once per
``facts.STEP_S``) every table starts afresh. Pods of other kinds (several bitstreams)
are scored per call, and so are DRA pods (``agent.extender.drascoring``: the allocator, not
the extender, chooses their slots, so a node's score depends on its slot order).

The answer is **shifted** (:func:`~agent.extender.scoretable.best_ranked`): the
lowest score among the names asked becomes 0 and every node at that floor is left
out (kube-scheduler counts a node missing from the answer as 0). Adding the same
constant to every candidate's score changes no ranking. The scheduler adds the answer
up per node, so its order carries nothing. It then lists at most ``limit`` nodes
(``--answer-limit``): the best by score, then by packing (the shipped profile's
MostAllocated score), then in the order asked; the others count as the floor. Once
the cluster's values spread the scores, most of 500 names stand out above a few nodes
whose free slots hold wanted bitstreams, and the answer would list nearly all of them
(17 kB that kube-scheduler decodes inside its cycle). The scheduler takes the node of
best score plus packing, and that is nearly always one of those kept: they score
highest, and of equal scores the fullest come first. A DRA pod's answer (no scheduler
plugin packs its slots) lists the best packed at 1 even when every node scores the floor.
"""

from __future__ import annotations

import itertools
import sys
import zlib
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from agent.extender import sample
from agent.extender.demand import PodDemand
from agent.extender.drascoring import DRA_ANSWER_LIMIT, prioritize_dra, score_dra
from agent.extender.facts import ClusterFacts
from agent.extender.fastpath import FastAnswers
from agent.extender.oneslot import OneSlotIndex
from agent.extender.promises import Promises
from agent.extender.scoretable import ANSWER_LIMIT, RANK_SCALE, ChangeLog, Scores, ScoreTable, best_ranked, ranks_of
from agent.extender.scoring import (
    CLOCK_STEP_S,
    LRU_HORIZON_S,
    NodeLookup,
    ScoreWeights,
    prioritize_nodes,
    score_one_slot,
    score_single,
)

__all__ = [
    "ANSWER_LIMIT",
    "RANK_SCALE",
    "ChangeLog",
    "ScoreBoard",
    "ScoreTable",
    "Scores",
    "best_ranked",
    "distinct",
    "ranks_of",
    "reported",
]

#: Kinds of pod whose tables are kept (least recently used dropped first); each holds at most every node.
TABLE_LIMIT = 256
#: Pods remembered as counted in the request shares (a pod the scheduler retries is counted once).
COUNTED_PODS = 4096
_BOARDS = itertools.count()


def packing_for(demand: PodDemand, lookup: NodeLookup) -> Callable[[str], int]:
    """A node's MostAllocated score for this pod's slots (0 for a node without published state)."""
    count = demand.requested

    def packing(name: str) -> int:
        node = lookup(name)
        return 0 if node is None else node.packing(count)

    return packing


def distinct(names: Sequence[str]) -> Sequence[str]:
    """The names asked, each once (kube-scheduler never repeats one; an answer must not list one twice)."""
    return names if len(set(names)) == len(names) else list(dict.fromkeys(names))


def reported(cache: ChangeLog, names: Sequence[str]) -> Sequence[str]:
    """The names asked that the node watch reported (with published state or without), each once. A name it
    never reported (a node created a moment ago, or none at all) is left out of the answer: it scores the
    floor, as the one-slot index scores it."""
    nodes, unpublished = cache.nodes, cache.unpublished
    return distinct([name for name in names if name in nodes or name in unpublished])


class ScoreBoard:
    """Prioritize for names from the node cache, with a score table per kind of pod (see the module docstring)."""

    def __init__(
        self,
        weights: ScoreWeights,
        facts: ClusterFacts | None = None,
        limit: int = ANSWER_LIMIT,
        promises: bool = True,
    ) -> None:
        self._weights = weights
        #: Free copies promised to one-slot pods being placed (``agent.extender.promises``); None: off.
        self.promises = Promises() if promises else None
        #: Names this board's own values in the node states' memos (which every board shares).
        self._token = next(_BOARDS)
        self.facts = facts if facts is not None else ClusterFacts()
        #: The pods counted, oldest first: an OrderedDict, whose oldest entry is found in constant time (a dict
        #: used as a queue walks past every entry deleted from its front, up to thousands, on each call).
        self._counted: OrderedDict[str, None] = OrderedDict()
        self._cache: ChangeLog | None = None
        self._tables: dict[tuple[str, int, int], ScoreTable] = {}
        self._one_slot = OneSlotIndex(weights)
        #: Entries an answer lists at most (``best_ranked``; 0: every node that stands out).
        self.limit = limit
        #: The compiled fast path answering the common call from the connection (``agent.extender.fastpath``).
        self.fast: FastAnswers | None = None

    def use_fast_path(self, engine: sample.FastPath) -> None:
        """Arm ``engine`` after each one-slot answer (it replaces the fast path used before, if any)."""
        if self.fast is not None:
            self.fast.disarm()
        self.fast = FastAnswers(engine, self.facts, self._one_slot, self.promises, self._counted, COUNTED_PODS)

    def disarm_fast_path(self) -> None:
        """Before any answer Python makes: the fast path answers nothing until armed again."""
        if self.fast is not None:
            self.fast.disarm()

    def follow_nodes(self, cache: ChangeLog, now: float) -> None:
        """After a node event, outside any scheduling call: the one-slot index and the promises follow it now, and
        the fast path is armed again for the bitstreams it held, so that the next call of each is not left to
        Python. Not past the cluster values' step (the next call works them out again first), nor while the
        fast path is disarmed (it waits for a call that Python answers)."""
        fast, facts, promises = self.fast, self.facts, self.promises
        if fast is None or not fast.engine.armed or not now < facts.fixed_until():
            return
        for bitstream in fast.engine.bitstreams:
            shadowed = promises.shadowed(cache, "", bitstream, now) if promises is not None else frozenset()
            tables = self._one_slot.tables(cache, bitstream, facts.values, facts.version, now, self.limit, shadowed)
            if tables is not None:
                fast.arm(cache, bitstream, tables, now)

    def prepare(self, cache: ChangeLog, now: float) -> None:
        """What the calls answer from, made current now (the one-slot index; see ``OneSlotIndex.follow``), with
        the cluster's values as last worked out: working them out is left to the calls, on their own clock."""
        self.disarm_fast_path()
        self._one_slot.follow(cache, self.facts.values, self.facts.version, now)

    def after_answer(self) -> None:
        """Bookkeeping the answer just given does not depend on: the promise it made is recorded (every call
        records a pending one first, so calling this is not needed for correctness, only to keep it out of the
        next call's time)."""
        if self.promises is not None:
            self.promises.record()
            if self.fast is not None:
                self.fast.forget_reshaped()

    def count(self, demand: PodDemand) -> None:
        """Count the pod's bitstreams in the request shares, once per pod."""
        self._count(demand.pod, demand.by_bitstream)

    def _count(self, pod: str, bitstreams: Iterable[str]) -> None:
        if pod in self._counted:
            return
        if len(self._counted) >= COUNTED_PODS:
            self._counted.popitem(last=False)
        self._counted[pod] = None
        for bitstream in bitstreams:
            self.facts.note_request(bitstream)

    def prioritize_body(self, cache: ChangeLog, body: bytes, now: float) -> bytes | None:
        """The encoded answer to a request whose pod asks one slot of one bitstream, made from its bytes by the
        compiled reader (``sample.one_slot_head``, ``sample.answer``); None for any other request, which the
        caller parses and passes to :meth:`prioritize`. Either way the answer and the board's state after are
        the same (a request declined after the pod was counted is counted once: counting is once per pod)."""
        head = sample.one_slot_head(body) if sample.COMPILED else None
        if head is None:
            return None
        pod, bitstream, start = head
        self._count(pod, (bitstream,))
        facts, promises = self.facts, self.promises
        keep = facts.keep_values(cache.nodes.values(), now)
        shadowed = promises.shadowed(cache, pod, bitstream, now) if promises is not None else frozenset()
        tables = self._one_slot.tables(cache, bitstream, keep, facts.version, now, self.limit, shadowed)
        if tables is None:
            return None
        base, lifted, skip, unknown = tables
        if base is None:
            return b"[]"
        made = sample.answer(body, start, base, lifted, skip, unknown, self.limit, zlib.crc32(pod.encode()))
        if made is None:  # a node without published state asked about: per name
            return None
        if self.fast is not None:
            self.fast.arm(cache, bitstream, tables, now)
        return made[0] if promises is None else promises.settle_encoded(cache, pod, bitstream, now, made)

    def prioritize(
        self, cache: ChangeLog, demand: PodDemand, names: Sequence[str], lookup: NodeLookup, now: float
    ) -> Scores:
        """The shifted scores of ``names``, floor left out, at most ``limit`` of them (``best_ranked``)."""
        if not demand.by_bitstream:
            return []  # neutral everywhere: nothing stands out
        self.count(demand)
        facts = self.facts
        keep = facts.keep_values(cache.nodes.values(), now)
        if demand.dra is not None:
            return self._prioritize_dra(cache, demand, names, lookup, keep, now)
        if demand.single is not None and demand.single[1] == 1 and not demand.unnamed:
            bitstream, promises = demand.single[0], self.promises
            shadowed = promises.shadowed(cache, demand.pod, bitstream, now) if promises is not None else frozenset()
            tops: list[str] | None = []
            answer = self._one_slot.prioritize(
                cache, bitstream, names, keep, facts.version, now, self.limit, shadowed, tops=tops
            )
            if answer is None:  # the catalogs disagree, or a node without published state: per name
                names, tops = reported(cache, names), None
                answer = best_ranked(names, self._single_ranks(cache, demand, names, keep, now), self.limit)
            return answer if promises is None else promises.settle(cache, demand.pod, bitstream, answer, now, tops)
        names = reported(cache, names)
        if demand.single is None:
            scores = prioritize_nodes(demand, names, lookup, self._weights, now, keep, facts.version)
            return best_ranked(names, ranks_of(scores, packing_for(demand, lookup)), self.limit)
        return best_ranked(names, self._single_ranks(cache, demand, names, keep, now), self.limit)

    def _prioritize_dra(
        self,
        cache: ChangeLog,
        demand: PodDemand,
        names: Sequence[str],
        lookup: NodeLookup,
        keep: Mapping[str, float],
        now: float,
    ) -> Scores:
        """A DRA pod (``agent.extender.drascoring``): scored per name, promised copies taken off, and a
        one-slot pod promised the copy its answer tops with, as a device-plugin pod is."""
        promises, single = self.promises, demand.single
        limit = DRA_ANSWER_LIMIT if self.limit <= 0 else min(self.limit, DRA_ANSWER_LIMIT)
        if demand.dra is not None and len(demand.dra) == 1 and demand.dra[0][1] == 1:
            # one slot: from the index, as a device-plugin pod's answer
            answer = self._one_slot_dra(cache, demand.dra[0][0], demand, names, lookup, keep, now, limit)
            if answer is not None:
                return answer
        names = reported(cache, names)
        promised: Mapping[str, int] = {}
        if promises is not None and single is not None:
            promised = promises.promised(cache, demand.pod, single[0], now)
        scores = prioritize_dra(demand, names, lookup, self._weights, now, keep, self.facts.version, promised)
        answer = best_ranked(names, ranks_of(scores, packing_for(demand, lookup)), limit, pack_ties=True)
        if promises is not None and single is not None and single[1] == 1:
            return promises.settle(cache, demand.pod, single[0], answer, now)
        return answer

    def _one_slot_dra(
        self,
        cache: ChangeLog,
        bitstream: str,
        demand: PodDemand,
        names: Sequence[str],
        lookup: NodeLookup,
        keep: Mapping[str, float],
        now: float,
        limit: int,
    ) -> Scores | None:
        """A one-slot DRA pod's answer from the one-slot index (None: the catalogs disagree, score per name); a
        node whose free copies are all promised is scored on its own by the slot the allocator takes there."""
        promises = self.promises
        shadowed: Collection[str] = frozenset()
        taken: Mapping[str, int] = {}
        if promises is not None:
            shadowed = promises.shadowed(cache, demand.pod, bitstream, now)
            taken = promises.taken(cache, bitstream, now)
        step_now = float(int(now // CLOCK_STEP_S) * CLOCK_STEP_S)
        weights = self._weights

        def alone(name: str) -> int:
            return score_dra(demand, lookup(name), weights, step_now, keep, taken.get(name, 0))

        version = self.facts.version
        tops: list[str] = []
        answer = self._one_slot.prioritize(cache, bitstream, names, keep, version, now, limit, shadowed, alone, tops)
        if answer is None or promises is None:
            return answer
        return promises.settle(cache, demand.pod, bitstream, answer, now, tops)

    def _single_ranks(
        self, cache: ChangeLog, demand: PodDemand, names: Sequence[str], keep: Mapping[str, float], now: float
    ) -> list[int]:
        """The ranks of ``names`` for a pod that names one bitstream, from this kind's table."""
        assert demand.single is not None
        bitstream, count = demand.single
        facts = self.facts
        if cache is not self._cache:
            self._cache, self._tables = cache, {}
        table = self._table(cache, demand, now)
        ranks = table.ranks
        if not all(map(ranks.__contains__, names)):  # names not ranked for this kind yet (or since they changed)
            step_now = float(table.step * CLOCK_STEP_S)
            ageing = step_now - LRU_HORIZON_S
            nodes, weights, volatile = cache.nodes, self._weights, table.volatile
            one_slot = count == 1 and not demand.unnamed
            version = f"{self._token}|{table.step}|{facts.version}"
            slots = demand.requested
            for name in names:
                if name in ranks:
                    continue
                node = nodes.get(name)
                name = sys.intern(name)  # one string per node name, shared by every table
                if node is None:
                    ranks[name] = weights.neutral * RANK_SCALE
                    continue
                if one_slot:
                    score = score_one_slot(bitstream, node, weights, step_now, keep, version)
                else:
                    score = score_single(demand, node, weights, step_now, keep)
                if node.recent_use > ageing:
                    volatile.add(name)
                ranks[name] = score * RANK_SCALE + node.packing(slots)
        return list(map(ranks.__getitem__, names))

    def _table(self, cache: ChangeLog, demand: PodDemand, now: float) -> ScoreTable:
        """This kind of pod's table, current with the cache: changed nodes dropped, to be scored when asked."""
        assert demand.single is not None
        bitstream, count = demand.single
        key = (bitstream, count, demand.unnamed)
        step = int(now // CLOCK_STEP_S)
        table = self._tables.pop(key, None)  # popped and put back: the dict keeps the least recently used first
        if table is None or table.generation != cache.generation or table.keep_version != self.facts.version:
            if len(self._tables) >= TABLE_LIMIT:
                del self._tables[next(iter(self._tables))]
            table = ScoreTable(cache.generation, self.facts.version, step, len(cache.changes))
        else:
            if table.step != step:
                for name in table.volatile:
                    table.ranks.pop(name, None)
                table.volatile.clear()
                table.step = step
            if table.seen < len(cache.changes):
                for name in cache.changes[table.seen :]:
                    table.ranks.pop(name, None)
                    table.volatile.discard(name)
                table.seen = len(cache.changes)
        self._tables[key] = table
        return table

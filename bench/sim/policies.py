"""Placement policies for the cluster simulation, the project's own code where there is one.

(a) spread+first-fit   kube-scheduler's spreading (most free slots), first free slots on the node
(b) spread+ours        the same placement, slots chosen by the agent's policy (agent.slots.choose_preferred)
(c) extender+ours      the shipped fpga-scheduler profile (daemonset/scheduler-config.yaml): NodeResourcesFit
                       for example.com/fpga-slot as configured there, plus the extender's answer
                       (agent.extender.ranking.Scorer, as the extender serves prioritize: its scoring,
                       its score tables and its cluster facts, with the configured weight),
                       slots by the agent's policy
(c') the other packing (c) with the opposite NodeResourcesFit strategy (spreading if (c) packs, and the
                       other way round), to show what the shipped choice is worth

Each of them sees only the nodes kube-scheduler's search finds for the pod (``bench.sim.sampling``):
the sample, not the cluster, is filtered, scored and sent to the extender.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.nodestate import NodeSlots, node_state
from agent.extender.ranking import ANSWER_LIMIT, Scorer, Scores
from agent.extender.scoring import ScoreWeights
from agent.slots.allocator import choose_preferred
from agent.slots.model import DeviceNode, Health, Holder, Slot, SlotId
from agent.slots.published import NodeState
from agent.slots.registry import Content, SlotState
from bench.sim.engine import Placement, SimNode
from bench.sim.facts import ClusterFacts
from bench.sim.sampling import Sampler
from bench.sim.workload import Pod

PLATFORM = "sim-pr-v1"
#: Wall-clock origin for the simulation's times (last-used times are epoch seconds).
EPOCH = 1_700_000_000.0


def accelerator(bitstream: int) -> str:
    return f"accel-{bitstream:03d}"


def bitstream_name(bitstream: int) -> str:
    return f"bs-{bitstream:03d}"


def bitstream_index(name: str) -> int:
    """The bitstream that :func:`bitstream_name` named ``name``."""
    return int(name.removeprefix("bs-"))


def published(node: SimNode, catalog: dict[str, str]) -> NodeSlots:
    """What the node's agent would publish, parsed as the extender parses it (cached per change)."""
    if not isinstance(node.cached, NodeSlots):
        records = [
            {
                "id": f"{node.name}-slot{i}",
                "card": node.name,
                "numa": 0,
                "platform": PLATFORM,
                "bitstream": None if s.bitstream is None else bitstream_name(s.bitstream),
                "accelerator": None if s.bitstream is None else accelerator(s.bitstream),
                "free": s.holder is None,
                "healthy": True,
                "last_used": int(EPOCH + s.last_used) if s.last_used else None,
            }
            for i, s in enumerate(node.slots)
        ]
        node.cached = node_state(NodeState(node.name, "1", tuple(records), catalog))
    return node.cached


def slot_states(node: SimNode, now: float) -> dict[str, SlotState]:
    """The node's slots as the agent's registry would hold them."""
    states = {}
    for i, s in enumerate(node.slots):
        slot_id = SlotId(f"{node.name}-slot{i}")
        slot = Slot(
            id=slot_id,
            card=node.name,
            region=f"slot{i}",
            numa=0,
            device_nodes=(DeviceNode("/dev/null", "/dev/null"),),
            platform=PLATFORM,
            loaded=None if s.bitstream is None else accelerator(s.bitstream),
            health=Health.HEALTHY,
            backend="sim",
        )
        content = None if s.bitstream is None else Content(bitstream_name(s.bitstream), accelerator(s.bitstream))
        holder = None if s.holder is None else Holder(allocated_at=EPOCH + now)
        states[slot_id] = SlotState(slot, holder, EPOCH + s.last_used if s.last_used else None, True, content)
    return states


SlotChoice = Callable[[SimNode, Pod, float], list[int]]


def first_fit(node: SimNode, pod: Pod, now: float) -> list[int]:
    return node.free()[: pod.slots]


def ours(node: SimNode, pod: Pod, now: float) -> list[int]:
    states = slot_states(node, now)
    available = [sid for sid, st in states.items() if st.holder is None]
    chosen = choose_preferred(states, available, [], pod.slots, accelerator(pod.bitstream))
    return [int(sid.rsplit("slot", 1)[1]) for sid in chosen]


def agent_order(node: SimNode, pod: Pod, now: float) -> list[int]:
    """Every free slot of the node, in the order the agent's policy would take them for this pod."""
    states = slot_states(node, now)
    available = [sid for sid, st in states.items() if st.holder is None]
    chosen = choose_preferred(states, available, [], len(available), accelerator(pod.bitstream))
    return [int(sid.rsplit("slot", 1)[1]) for sid in chosen]


#: (node size, slots asked, MostAllocated) -> the NodeResourcesFit score by free slots (``fit_scores``).
_FIT_SCORES: dict[tuple[int, int, bool], list[int]] = {}


def _fit_table(size: int, asked: int, most_allocated: bool) -> list[int]:
    """The score of a node of ``size`` slots for a pod asking ``asked``, by its free slots (0 where it does not fit)."""
    key = (size, asked, most_allocated)
    table = _FIT_SCORES.get(key)
    if table is None:
        table = []
        for free in range(size + 1):
            used = size - free + asked
            table.append(used * 100 // size if most_allocated else (size - used) * 100 // size)
        _FIT_SCORES[key] = table
    return table


def fit_scores(nodes: list[SimNode], pod: Pod, most_allocated: bool, rng: random.Random) -> list[tuple[float, SimNode]]:
    """kube-scheduler's NodeResourcesFit score (0..100) over the nodes where the pod fits.

    LeastAllocated (spreading, the default) favours nodes with many free slots;
    MostAllocated (packing) favours nodes whose slots are in use. As the scheduler
    computes them: with the pod's own request counted as in use, in whole points
    (integer division), so that nodes of different sizes compare as they do there.
    Ties are broken at random, as the scheduler picks among its best nodes (one draw per
    fitting node, in order).
    """
    need, draw = pod.slots, rng.random
    tables: dict[int, list[int]] = {}
    out = []
    for node in nodes:
        free = node.free_count
        if free >= need:
            size = len(node.slots)
            table = tables.get(size)
            if table is None:
                table = tables[size] = _fit_table(size, need, most_allocated)
            out.append((table[free] + draw() * 1e-3, node))
    return out


def best_node(scored: list[tuple[float, SimNode]]) -> SimNode:
    """The node of the highest score, the first of equal ones (as ``max`` keyed by score)."""
    scores = [score for score, _ in scored]
    return scored[scores.index(max(scores))][1]


def plain(
    rng: random.Random, choose: SlotChoice, most_allocated: bool = False, sampler: Sampler | None = None
) -> Placement:
    search = sampler if sampler is not None else Sampler()

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        scored = fit_scores(search.feasible(nodes, pod.slots), pod, most_allocated, rng)
        if not scored:
            return None
        node = best_node(scored)
        return node, choose(node, pod, now)

    return place


class SimNodeCache:
    """The extender's node cache as the score tables follow it (``agent.extender.ranking.ChangeLog``).

    Holds each node's published state (as ``published`` builds it) and logs the name of
    every node whose state was built anew, as the node watch does for a changed Node.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeSlots] = {}
        self.generation = 0
        self.changes: list[str] = []
        self._journal: list[SimNode] | None = None
        self._read = 0

    def refresh(self, nodes: list[SimNode], catalog: dict[str, str]) -> None:
        """Every node at first, then those the nodes' journal logged as changed since (``SimNode.changed``)."""
        journal = nodes[0].journal if nodes else None
        if journal is None or journal is not self._journal:
            changed: list[SimNode] = nodes
            self._journal = journal
        else:
            changed = journal[self._read :]
        self._read = len(journal) if journal is not None else 0
        for node in changed:
            if not isinstance(node.cached, NodeSlots) or self.nodes.get(node.name) is not node.cached:
                self.nodes[node.name] = published(node, catalog)
                self.changes.append(node.name)


class WithExtender:
    """NodeResourcesFit plus the extender's score (0..10, scaled x10 x weight) when two or more nodes fit.

    The extender part is the product's own path: ``agent.extender.ranking.Scorer``
    over a node cache fed from the nodes' published states, as ``fpga-agent extender``
    answers prioritize (request shares counted once per pod, cluster values, score
    tables, clock steps, the answer shifted so that the lowest score is 0 and left out,
    at most ``answer_limit`` nodes listed; a shift of every candidate alike changes no
    ranking). As kube-scheduler does, the
    extender is not asked when one node fits (the scheduler then skips scoring).
    """

    def __init__(
        self,
        rng: random.Random,
        choose: SlotChoice,
        weights: ScoreWeights,
        weight: int,
        catalog: dict[str, str],
        most_allocated: bool,
        facts: ClusterFacts | None = None,
        answer_limit: int = ANSWER_LIMIT,
        sampler: Sampler | None = None,
    ) -> None:
        self.rng, self.choose, self.weights, self.weight = rng, choose, weights, weight
        self.sampler = sampler if sampler is not None else Sampler()
        self.catalog, self.most_allocated = catalog, most_allocated
        #: The cluster's values of free copies (``bench.sim.facts``), told every pod the extender is asked about.
        self.facts = facts if facts is not None else ClusterFacts()
        self.board = Scorer(weights, answer_limit, values=self.facts.keep_values)
        self.cache = SimNodeCache()

    def __call__(self, nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        scored = fit_scores(self.sampler.feasible(nodes, pod.slots), pod, self.most_allocated, self.rng)
        if not scored:
            return None
        if len(scored) >= 2:
            demand = PodDemand.of(f"p{pod.index}", [ContainerDemand("main", pod.slots, bitstream_name(pod.bitstream))])
            self.cache.refresh(nodes, self.catalog)
            names = [n.name for _, n in scored]
            self.facts.note_request(bitstream_name(pod.bitstream))
            answer = self.board.prioritize(self.cache, demand, names, EPOCH + now)
            scored = with_answer(scored, names, answer, 10.0 * self.weight)
        node = best_node(scored)
        return node, self.choose(node, pod, now)


def with_answer(
    scored: list[tuple[float, SimNode]], names: list[str], answer: Scores, scale: float
) -> list[tuple[float, SimNode]]:
    """The scores with an extender's answer added (``scale`` times its score), as the scheduler adds it; a node
    the answer leaves out gains nothing, so only the nodes listed are touched."""
    if not answer:
        return scored
    at = {name: index for index, name in enumerate(names)} if len(answer) > 4 else None
    out = list(scored)
    for name, score in answer:
        index = at[name] if at is not None else names.index(name)
        base, node = out[index]
        out[index] = (base + scale * score, node)
    return out

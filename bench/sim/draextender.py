"""The extender's prioritize for a DRA pod, as the fpga-scheduler's DRA profile calls it (modelled here).

In DRA mode the extender does not choose the slots: on each node the scheduler's
allocator takes the first fit of the claim (daemonset/examples/dra/cached-first.yaml):
N free slots holding the bitstream when the node has them (``cached``), else the
first N free slots in the slice's order (``any``; the agent lists empty slots first,
then the least recently used: ``agent.dra.mode.eviction_order``). So the extender
scores a node for a DRA pod that asks N slots of bitstream B by exactly those slots,
each valued as :mod:`agent.extender.scoring` values a slot for a device-plugin pod:

* ``loaded`` each, when N free slots of the node hold B;
* else, for the first N free slots in slice order: ``empty`` for an empty slot,
  ``loaded`` for one that holds B (a partial hit that the ``any`` alternative takes
  because it comes early in the order), and otherwise the overwrite value
  ``empty - (empty - evict) * value`` of that slot (``_overwrite_score``: its content's
  cluster value and its own recency);
* the node's score is their mean rounded (0..10), less ``DOWNLOAD_PENALTY`` when the
  node must pull B; 0 when the node's catalog lacks B or fewer than N slots are free.

The rest is the extender's as (c) runs it (``agent.extender.ranking.Scorer``): the
pod counted once in the request shares, the cluster values (``keep``), the clock in
steps of ``CLOCK_STEP_S``, and the answer shifted to its floor (``best_ranked``), the
best by score, then by MostAllocated packing of the slots, then in the order asked.

The answer lists **one** node (``agent.extender.drascoring.DRA_ANSWER_LIMIT``), not ``ANSWER_LIMIT``: in DRA mode
no scheduler plugin packs the slots (DRA devices are not node resources, so
NodeResourcesFit sees none), and of the nodes an answer ranks equal the scheduler
would pick at random. Listing only the best by score and packing is what the
MostAllocated profile of (c) does with the extender's ties. On the grid (seed 1) this
takes DRA placement from 1.19 x (c)'s reconfigurations at the worst point (median
1.05) with 16 entries to 1.04 x (median 1.01) with one. When every node scores alike,
the answer still lists the best packed (``pack_ties``): seed 2, point 1, 1.071 -> 1.041
(the mean over six tie-break streams 1.035 -> 1.030; bench/RESULTS.md).

Left out: promises of free copies to one-slot pods (the simulation publishes a node's
new state before the next pod, where promises change nothing), and the order of
slots freed within the same second (the slice breaks such ties by slot ID, the
published state by bitstream).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.extender.demand import PodDemand
from agent.extender.drascoring import DRA_ANSWER_LIMIT, score_dra
from agent.extender.nodestate import NodeSlots
from agent.extender.ranking import Scorer
from agent.extender.scoring import ScoreWeights
from bench.sim.engine import SimNode
from bench.sim.policies import EPOCH, SimNodeCache, bitstream_name
from bench.sim.workload import Pod


def first_fit_score(
    node: NodeSlots, bitstream: str, count: int, weights: ScoreWeights, now: float, keep: Mapping[str, float]
) -> int:
    """0..10 for the slots the DRA allocator takes on ``node`` for ``count`` slots of ``bitstream``: the
    extender's own rule (``agent.extender.drascoring.score_dra``)."""
    return score_dra(PodDemand.of_claims("sim", [(bitstream, count)]), node, weights, now, keep)


class DraExtender:
    """The extender's answer for DRA pods over the simulated nodes: name -> shifted score (absent: 0)."""

    def __init__(self, weights: ScoreWeights, catalog: dict[str, str], answer_limit: int = DRA_ANSWER_LIMIT) -> None:
        self.weights, self.catalog = weights, catalog
        self.board = Scorer(weights, answer_limit, promises=False)
        self.cache = SimNodeCache()

    def answer(self, nodes: list[SimNode], pod: Pod, names: list[str], now: float) -> dict[str, int]:
        """The extender's answer through its own score board, as it serves a DRA pod's prioritize: a one-slot pod
        scored per name by ``score_dra``."""
        demand = PodDemand.of_claims(f"p{pod.index}", [(bitstream_name(pod.bitstream), pod.slots)])
        self.cache.refresh(nodes, self.catalog)
        return dict(self.board.prioritize(self.cache, demand, names, EPOCH + now))

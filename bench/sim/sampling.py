"""kube-scheduler's feasible-node search: the scheduler looks at a sample of the nodes, not at all of them.

What kube-scheduler v1.36 does for each pod (``pkg/scheduler/schedule_one.go``,
``findNodesThatPassFilters`` and ``numFeasibleNodesToFind``):

* it runs the filters on the nodes in the order of its snapshot, starting where the
  previous pod's search ended, and stops once it has found enough nodes where the pod
  fits; only those are scored, and only those are sent to an extender (as names) or
  given to the DynamicResources plugin;
* "enough" is every node in clusters of fewer than 100 nodes; else the percentage of
  nodes to score: the profile's ``percentageOfNodesToScore`` if set, else the
  configuration's, and when that is 0 (the default) an adaptive one, 50 % less 1 % per
  125 nodes, at least 5 %; and never fewer than 100 nodes;
* the next pod's search starts after every node this one examined, fitting or not
  (the start index advances by the nodes examined, modulo the cluster's size).

A bitstream held free on a handful of nodes is then often outside the sample: at 5000
nodes the search stops after about 500 nodes that fit (10 %). The filters run in
parallel there, so a few more nodes than needed may be examined; that is left out.
"""

from __future__ import annotations

from bench.sim.engine import SimNode

#: Below this many nodes every node is examined, and a search never stops with fewer fitting nodes.
MIN_FEASIBLE_NODES = 100
#: The adaptive percentage's floor.
MIN_PERCENTAGE = 5
#: The adaptive percentage: this much, less 1 % per ``NODES_PER_PERCENT`` nodes.
BASE_PERCENTAGE = 50
NODES_PER_PERCENT = 125


def nodes_to_find(total: int, percentage: int | None = None) -> int:
    """How many fitting nodes the search stops at, for ``total`` nodes (``percentage`` None or 0: adaptive)."""
    if total < MIN_FEASIBLE_NODES:
        return total
    if not percentage:
        percentage = max(MIN_PERCENTAGE, BASE_PERCENTAGE - total // NODES_PER_PERCENT)
    return max(MIN_FEASIBLE_NODES, total * percentage // 100)


class Sampler:
    """The search of one scheduler: its start index is carried from pod to pod."""

    def __init__(self, percentage: int | None = None) -> None:
        #: The profile's percentageOfNodesToScore (None or 0: adaptive; 100: every node).
        self.percentage = percentage
        self.next_start = 0

    def feasible(self, nodes: list[SimNode], need: int) -> list[SimNode]:
        """The nodes with ``need`` free slots or more (NodeResourcesFit's filter) that this search finds, in the
        order it finds them.

        Node by node as the scheduler does, in runs: a run of k nodes is filtered at once when k more fitting
        nodes are wanted, so that the search can only stop at the end of a run, and it stops exactly where a
        walk node by node would."""
        total = len(nodes)
        if not total:
            return []
        wanted = nodes_to_find(total, self.percentage)
        start = self.next_start
        ring = nodes[start:] + nodes[:start] if start else nodes
        found: list[SimNode] = []
        examined = 0
        while examined < total and len(found) < wanted:
            end = min(total, examined + wanted - len(found))
            found += [node for node in ring[examined:end] if node.free_count >= need]
            examined = end
        self.next_start = (start + examined) % total
        return found

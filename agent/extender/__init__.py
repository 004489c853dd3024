"""The kube-scheduler extender: score nodes so that pods land where their bitstream is already loaded.

``fpga-agent extender`` (wired by ``agent.cluster.extenderservice``) feeds a state table from
watches and answers kube-scheduler's calls from it: ``wire`` (parse, encode), ``ranking``
(score every name, rank, promise), ``scoring`` and ``drascoring`` (one node's score),
``server`` (aiohttp; the admission webhook on its own thread), imported from there so
that the agent, which reads its options from here, never loads aiohttp. See docs/scoring.md.
"""

from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.nodestate import NodeSlots, node_state, read_published_state
from agent.extender.scoring import ScoreWeights, filter_nodes, parse_score_weights, score_node
from agent.extender.table import StateTable, WatchedNode, parse_watched_state

__all__ = [
    "ContainerDemand",
    "NodeSlots",
    "PodDemand",
    "ScoreWeights",
    "StateTable",
    "WatchedNode",
    "filter_nodes",
    "node_state",
    "parse_score_weights",
    "parse_watched_state",
    "read_published_state",
    "score_node",
]

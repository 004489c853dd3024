"""The kube-scheduler extender: score nodes so that pods land where their bitstream is already loaded.

Wired by ``agent.cluster.extenderservice``: ``wire`` (parse, encode), ``ranking``, ``scoring`` and
``drascoring`` (scores), ``server`` (aiohttp, imported from there only, so that the agent, which reads
its options from here, never loads aiohttp). See docs/scoring.md.
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

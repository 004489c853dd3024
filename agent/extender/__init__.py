"""The kube-scheduler extender: score nodes so that pods land where their bitstream is already loaded.

Thin and stateless apart from a read-only node cache. kube-scheduler POSTs a pod
and candidate nodes; the extender answers from the slot state the agents publish
on their Nodes, without calling the API server:

* :mod:`~agent.extender.wire`: the extender wire format (Go field names) and reading
  a request into a :class:`~agent.extender.scoring.PodDemand`;
* :mod:`~agent.extender.nodestate`: a node's published annotations, parsed once into
  a frozen :class:`~agent.extender.nodestate.NodeSlots`;
* :mod:`~agent.extender.scoring`: filter and prioritize, pure functions;
* :mod:`~agent.extender.claimtemplates`, :mod:`~agent.extender.drapods` and
  :mod:`~agent.extender.drascoring`: DRA pods, read from the ResourceClaimTemplates they
  name (a watch-fed table) and scored by the slots the scheduler's allocator takes;
* :mod:`~agent.extender.cache`: node name -> state, fed by a node watch that the
  wiring (``agent.cli.main``) takes from ``agent.kube``; this package imports no adapter;
* :mod:`~agent.extender.server`: the app (``/filter``, ``/prioritize``, ``/healthz``, ``/metrics``), and the
  plain-HTTP probe port's (``/healthz``, ``/metrics``) beside an HTTPS one;
* :mod:`~agent.extender.admission`: DRA mode's admission webhook (``/validate`` on a port of its own), which
  refuses claims and pods naming a bitstream that no node has and nothing declares.
"""

from agent.extender.cache import NodeCache, RequestNodes, WatchedNode, parse_watched_node
from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.nodestate import NodeSlots, PublishedSlot, parse_node_slots, read_node_slots
from agent.extender.scoring import (
    ScoreWeights,
    filter_nodes,
    parse_score_weights,
    prioritize_nodes,
    score_node,
)
from agent.extender.server import Extender, bound_port, build_app, build_probe_app, serve, start, start_probe

__all__ = [
    "ContainerDemand",
    "Extender",
    "NodeCache",
    "NodeSlots",
    "PodDemand",
    "PublishedSlot",
    "RequestNodes",
    "ScoreWeights",
    "WatchedNode",
    "bound_port",
    "build_app",
    "build_probe_app",
    "filter_nodes",
    "parse_node_slots",
    "parse_score_weights",
    "parse_watched_node",
    "prioritize_nodes",
    "read_node_slots",
    "score_node",
    "serve",
    "start",
    "start_probe",
]

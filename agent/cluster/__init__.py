"""The cluster side seen from outside the nodes: what every node's agent has published.

``view`` reads the slot nodes and their published state through ``agent.kube`` for
``fpga-agent cluster``; the scheduler extender (``agent.extender``) reads the same
state in its own cache.
"""

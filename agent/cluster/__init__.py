"""The cluster side outside the scheduler's request path: running the extender, and the cluster view.

``extenderservice`` runs the scheduler extender (``agent.extender``) as a service: the
Node and FpgaBitstream watches (``agent.kube``) feeding its cache, its HTTP and probe
servers. ``view`` reads the slot nodes and their published state for ``fpga-agent cluster``.
"""

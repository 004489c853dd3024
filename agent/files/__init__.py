"""Files on the node's disk, standard library only: atomic installation, directory watching,
and what a bitstream file is called and how its identity is taken.

Below every adapter: the catalog (``agent.programming``), the pulls (``agent.bitstreams``)
and the kubelet protocols all install or watch files this way.
"""

"""The narrated demos behind ``fpga-agent demo`` and the stand-ins they run against.

One module per demo (``deviceplugin``, ``dra`` with ``draclaims``, ``extender``, ``pull`` with
its in-process ``registry``); :mod:`agent.demo.kubelet` stands in for the kubelet (device
manager, pod-resources, DRA side) and :mod:`agent.demo.kubeapi` for the API server. Shipped so
that the demos run on a fresh machine with no cluster, no root and no hardware.
"""

"""The node agent's shared core, used by both modes (device plugin and DRA).

``reconfigure`` is the programming pipeline (check a pod's wanted bitstream against the
catalog, program the slots, verify, recover); ``distribution`` pulls declared bitstreams
into the catalog before pods ask for them; ``nodestate`` publishes what the slots hold for
the extender; ``metrics`` and ``health`` are what operators and the kubelet's probes see.
The mode packages (``agent.deviceplugin``, ``agent.dra``) build on this; it imports neither.
"""

"""The node agent's shared core, used by both modes (device plugin and DRA); it imports neither.

``reconfigure`` is the programming pipeline, ``distribution`` pulls declared bitstreams into the catalog,
``nodestate`` publishes what the slots hold, ``metrics`` and ``health`` serve operators and probes.
"""

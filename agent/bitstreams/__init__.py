"""Bitstreams declared once in the cluster (FpgaBitstream objects), pulled and verified on demand.

Talks to OCI registries and HTTPS servers (aiohttp), and to the node catalog only through
:class:`puller.BitstreamStore` (``agent.programming.catalog.Catalog``); :class:`puller.BitstreamPuller` ties it
together."""

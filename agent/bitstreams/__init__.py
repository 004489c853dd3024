"""Bitstreams declared once in the cluster (FpgaBitstream objects), pulled and verified on demand.

* :mod:`declaration`: an FpgaBitstream as a :class:`Declaration`, and pull :class:`Credentials`;
* :mod:`reference`: OCI references (``registry/repository:tag`` or ``@sha256:...``);
* :mod:`registry`: the OCI distribution client (pull one layer, push one artifact);
* :mod:`https`: files from an https:// URL;
* :mod:`download`: streaming into a staged file (the catalog's) with size and sha256 checked on the way;
* :mod:`cache`: the byte budget, least recently used out, never a file in use;
* :mod:`puller`: :class:`BitstreamPuller`, which puts it together for the agent.

An adapter: it talks to registries and HTTPS servers (through aiohttp) and to the node
catalog only through the small :class:`BitstreamStore` interface, which
``agent.programming.adoption.PulledCatalog`` implements; ``app.py`` wires the two.
"""

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials, Declaration, declaration_object, parse_declaration
from agent.bitstreams.https import HttpsSource
from agent.bitstreams.puller import BitstreamPuller, BitstreamStore, StoredBitstream
from agent.bitstreams.reference import Reference, parse_reference
from agent.bitstreams.registry import RegistryClient

__all__ = [
    "BitstreamPuller",
    "BitstreamStore",
    "CacheBudget",
    "Credentials",
    "Declaration",
    "HttpsSource",
    "Reference",
    "RegistryClient",
    "StoredBitstream",
    "declaration_object",
    "parse_declaration",
    "parse_reference",
]

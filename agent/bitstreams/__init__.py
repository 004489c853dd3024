"""Bitstreams declared once in the cluster (FpgaBitstream objects), pulled and verified on demand.

Talks to OCI registries and HTTPS servers (aiohttp), and to the node catalog only through
:class:`BitstreamStore` (``agent.programming.adoption.PulledCatalog``); :class:`BitstreamPuller` ties it together."""

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials, Declaration, declaration_object, parse_declaration
from agent.bitstreams.http import HttpsSource
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

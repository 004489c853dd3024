"""The error tree of fpga-slot: the base :class:`FpgaSlotError` and a class per kind of failure.

Library errors are wrapped once, where an adapter calls the library, and mapped to gRPC or HTTP errors
only at the edge. docs/development.md ("The error tree") draws the tree. The helpers (:func:`shown`
and the rest) keep untrusted values in messages short and on one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Characters of an untrusted value shown in a message, a log line or an Event.
SHOWN_CHARS = 128
#: Values of an untrusted list shown.
SHOWN_ITEMS = 8


def shown(value: object) -> str:
    """An untrusted value as messages show it: quoted with escapes, cut to SHOWN_CHARS with its original length."""
    # a string is quoted with escapes; anything else is its repr, already escaped (a number stays a number)
    text, quote = (value, repr) if isinstance(value, str) else (repr(value), str)
    if len(text) <= SHOWN_CHARS:
        return quote(text)
    return f"{quote(text[:SHOWN_CHARS])}... ({len(text)} characters)"


#: A Kubernetes object name (a DNS subdomain, at most 253 characters): shown as it is.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def is_object_name(value: str) -> bool:
    """Whether ``value`` can name a Kubernetes object (a DNS subdomain: lower case, digits, ``-``, ``.``)."""
    return _OBJECT_NAME.fullmatch(value) is not None


def shown_name(value: str) -> str:
    """A Kubernetes name from an untrusted caller: as it is when a valid object name, else :func:`shown`."""
    return value if is_object_name(value) else shown(value)


def shown_claim(namespace: str, name: str) -> str:
    """``claim <namespace>/<name>`` for messages, each part through :func:`shown_name`."""
    return f"claim {shown_name(namespace)}/{shown_name(name)}"


def shown_list(values: Iterable[object]) -> str:
    """Untrusted values, each :func:`shown`, at most SHOWN_ITEMS of them."""
    items = list(values)
    text = ", ".join(shown(value) for value in items[:SHOWN_ITEMS])
    if len(items) > SHOWN_ITEMS:
        text += f", ... ({len(items)} in all)"
    return f"[{text}]"


class FpgaSlotError(Exception):
    """Base of every error fpga-slot raises on purpose."""


class ConfigError(FpgaSlotError):
    """A configuration value is invalid; the message names the flag and the source."""


class RequestError(FpgaSlotError):
    """A request is wrong in itself (bad IDs, impossible size); nothing was changed."""


class UnknownSlotError(RequestError):
    """A request names a slot ID this node does not advertise."""


class DuplicateSlotError(RequestError):
    """A request names the same slot ID more than once."""


class UnhealthySlotError(RequestError):
    """A request names a slot that is advertised Unhealthy."""


class AllocationSizeError(RequestError):
    """A preferred-allocation request whose size cannot be met from what it offers."""


class ExtenderRequestError(RequestError):
    """A scheduler-extender call whose body is not an ExtenderArgs as kube-scheduler sends it (HTTP 400)."""


class AdmissionRequestError(RequestError):
    """An admission webhook call whose body is not an AdmissionReview v1 request (HTTP 400)."""


class DiscoveryError(FpgaSlotError):
    """A discovery backend failed to enumerate or watch devices."""


class CatalogError(FpgaSlotError):
    """A bitstream cannot be used as asked; nothing was programmed."""


class InvalidBitstreamName(CatalogError):
    """A bitstream name outside ``[a-z0-9][a-z0-9._-]*`` or longer than 63 characters."""


class UnknownBitstream(CatalogError):
    """No catalog entry has that name."""


class BitstreamFileError(CatalogError):
    """The entry's file is missing or unreadable, or its metadata record is malformed."""


class BitstreamHashError(CatalogError):
    """The file's sha256 differs from the one recorded in the catalog."""


class PlatformMismatch(CatalogError):
    """The bitstream's PR interface id differs from the slot's platform."""


class DeclarationConflict(CatalogError):
    """A local catalog entry and the cluster's FpgaBitstream of the same name have different hashes."""


class PullInProgress(CatalogError):
    """A declared bitstream was not pulled by the call's deadline; the pull goes on for the next attempt."""


class PullError(CatalogError):
    """A declared bitstream could not be pulled into the catalog; nothing was written."""


class UndeclaredBitstream(PullError, UnknownBitstream):
    """The name is neither in the node's catalog nor declared by an FpgaBitstream."""


class SourceUnreachable(PullError):
    """The registry or HTTPS server could not be reached, or answered with a server error."""


class SourceAuthError(PullError):
    """The registry or HTTPS server refused the credentials (HTTP 401 or 403)."""


class SourceNotFound(PullError):
    """The artifact, tag or file is not at the source (HTTP 404)."""


class ArtifactFormatError(PullError):
    """The OCI manifest is not an artifact with exactly one bitstream layer."""


class PulledHashMismatch(PullError, BitstreamHashError):
    """The pulled bytes differ from the declared size or sha256."""


class PulledPlatformMismatch(PullError, PlatformMismatch):
    """The pulled bitstream does not fit the declared platform or the node's slots."""


class CacheFullError(PullError):
    """The cache budget is taken by bitstreams in use, so none can be evicted for a new one."""


class PullStorageError(PullError):
    """The node could not store a pulled bitstream (a full disk, a read-only or failing file system)."""


class ProgrammingError(FpgaSlotError):
    """Reconfiguring a slot failed; the slot's content is unknown afterwards."""


class ProgrammingTimeout(ProgrammingError):
    """Reconfiguring a slot did not finish within its deadline."""


class PodLookupError(FpgaSlotError):
    """The pod/container holding some slots cannot be found (pod-resources or API server)."""


class KubeError(FpgaSlotError):
    """The API server could not be reached or refused a request."""


class KubeletError(FpgaSlotError):
    """The kubelet could not be reached or answered with an error."""


class RegistrationError(KubeletError):
    """The kubelet refused or did not answer our RegisterRequest."""

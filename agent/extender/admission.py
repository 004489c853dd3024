"""The admission check: a claim, template or pod that names a bitstream nobody can provide is refused.

The extender's webhook (``POST /validate``, an AdmissionReview v1) reads the bitstreams an
object asks for with ``agent.slots.bitstreamrequest``, as the agent does, and refuses one
that no node's published catalog holds and no FpgaBitstream declares, naming it and how to
declare it. An UPDATE is checked only for bitstreams its old object did not name; anything
it does not recognise is allowed, and nothing is refused before both watches have listed.
No I/O: the answer comes from the request and the state table. What is checked, and why:
docs/dra.md ("Unknown bitstreams are refused when applied").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from agent.errors import AdmissionRequestError, shown
from agent.extender.claimtemplates import BITSTREAM_PARAMETER, DRIVER, MAX_CONFIGS
from agent.files.bitstream import is_valid_name
from agent.slots.bitstreamrequest import claim_bitstream, pod_spec_bitstreams

logger = logging.getLogger(__name__)

ADMISSION_VERSION = "admission.k8s.io/v1"
#: The largest AdmissionReview read: an object and its old version (etcd keeps objects up to 1.5 MiB each).
MAX_REVIEW_BYTES = 4 * 1024 * 1024
#: How to make a bitstream known, said in every refusal.
HOW_TO_DECLARE = (
    "declare it with an FpgaBitstream object (kind FpgaBitstream, apiVersion example.com/v1alpha1, "
    "metadata.name the bitstream's name; see docs/distribution.md) or add it to the nodes' catalogs "
    "(fpga-agent catalog add)"
)


class KnownBitstreams(Protocol):
    """Whether a bitstream can be programmed somewhere (the node cache)."""

    @property
    def bitstreams_listed(self) -> bool:
        """True once both the nodes and the FpgaBitstream objects have been listed."""
        ...

    def bitstream_known(self, name: str) -> bool: ...


def parse_review(body: bytes) -> Mapping[str, Any]:
    """The ``request`` of an AdmissionReview v1; AdmissionRequestError naming what is wrong."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise AdmissionRequestError(f"the body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise AdmissionRequestError("the body must be a JSON object (an AdmissionReview)")
    if review.get("apiVersion") != ADMISSION_VERSION or review.get("kind") != "AdmissionReview":
        raise AdmissionRequestError(
            f"expected apiVersion {ADMISSION_VERSION} and kind AdmissionReview, got "
            f"{shown(review.get('apiVersion'))} and {shown(review.get('kind'))}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise AdmissionRequestError("the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise AdmissionRequestError("request.uid must be a non-empty string of at most 128 characters")
    return request


def bitstreams_named(request: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """(where, value) of every bitstream the request's object asks for; nothing for other kinds. An UPDATE names
    only what its old object did not (a finalizer removed from an old claim is never refused)."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return
    named = _named_in(request.get("kind"), request.get("object"))
    if operation == "CREATE":
        yield from named
        return
    before = {repr(value) for _where, value in _named_in(request.get("kind"), request.get("oldObject"))}
    yield from ((where, value) for where, value in named if repr(value) not in before)


def _named_in(kind: object, obj: object) -> Iterator[tuple[str, object]]:
    if not isinstance(obj, Mapping) or not isinstance(kind, Mapping):
        return
    group, name = kind.get("group"), kind.get("kind")
    if group == "resource.k8s.io" and name == "ResourceClaim":
        yield from _in_configs(_at(obj, "spec", "devices", "config"), "spec.devices.config")
    elif group == "resource.k8s.io" and name == "ResourceClaimTemplate":
        yield from _in_configs(_at(obj, "spec", "spec", "devices", "config"), "spec.spec.devices.config")
    elif group == "" and name == "Pod":
        yield from _in_pod(obj)


def _at(obj: Mapping[str, Any], *keys: str) -> object:
    value: object = obj
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _in_configs(configs: object, where: str) -> Iterator[tuple[str, object]]:
    if not isinstance(configs, list):
        return
    for index, config in enumerate(configs[:MAX_CONFIGS]):
        opaque = config.get("opaque") if isinstance(config, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER:
            continue
        parameters = opaque.get("parameters")
        value = claim_bitstream(parameters) if isinstance(parameters, Mapping) else None
        if value is not None:
            yield f"{where}[{index}].opaque.parameters.{BITSTREAM_PARAMETER}", value


def _in_pod(pod: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    for key, value in pod_spec_bitstreams(pod):
        yield f"annotation {key}", value


def refusal(request: Mapping[str, Any], known: KnownBitstreams) -> str | None:
    """Why the request's object must be refused; None when it may be admitted."""
    for where, value in bitstreams_named(request):
        if not isinstance(value, str) or not is_valid_name(value):
            return (
                f"{where} must name a bitstream (lower-case letters, digits, '.', '_' and '-', starting with a "
                f"letter or digit), got {shown(value)}"
            )
        if known.bitstreams_listed and not known.bitstream_known(value):
            return (
                f"bitstream {shown(value)} ({where}) is unknown: no node's catalog holds it and no FpgaBitstream "
                f"declares it, so no slot could be programmed with it; {HOW_TO_DECLARE}"
            )
    return None


def review_answer(request: Mapping[str, Any], known: KnownBitstreams) -> bytes:
    """The AdmissionReview answer to ``request`` (from :func:`parse_review`), as one JSON body."""
    reason = refusal(request, known)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": reason is None}
    if reason is not None:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": reason}
        logger.info("admission: refused %s %s: %s", _kind_of(request), _name_of(request), reason)
    elif not known.bitstreams_listed and next(bitstreams_named(request), None) is not None:
        response["warnings"] = [
            "fpga-slot: bitstream not checked (the extender has not listed the nodes' catalogs and the "
            "FpgaBitstream objects yet); an unknown one fails at NodePrepareResources"
        ]
    review = {"apiVersion": ADMISSION_VERSION, "kind": "AdmissionReview", "response": response}
    return json.dumps(review, separators=(",", ":")).encode()


def _kind_of(request: Mapping[str, Any]) -> str:
    """The kind of a refused object: one of the three that are read (see :func:`bitstreams_named`)."""
    return str(_at(request, "kind", "kind"))


def _name_of(request: Mapping[str, Any]) -> str:
    """namespace/name as the request gives them (a pod made from generateName has no name yet), quoted."""
    namespace, name = request.get("namespace"), request.get("name") or _at(request, "object", "metadata", "name")
    return shown(f"{namespace or ''}/{name or '(generated)'}")


def validator(known: KnownBitstreams) -> Callable[[bytes], tuple[int, bytes]]:
    """``body -> (HTTP status, JSON body)``: the AdmissionReview answer, or 400 with an ``Error``."""

    def validate(body: bytes) -> tuple[int, bytes]:
        try:
            request = parse_review(body)
        except AdmissionRequestError as exc:
            return 400, json.dumps({"Error": str(exc)}).encode()
        return 200, review_answer(request, known)

    return validate

"""The admission check: a claim, template or pod that names a bitstream nobody can provide is refused.

The webhook (``POST /validate``, AdmissionReview v1) answers from the request and the state table,
no I/O; anything it does not recognise is allowed, and nothing is refused before both watches have
listed. What is checked, and why: docs/dra.md ("Unknown bitstreams are refused when applied").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agent.errors import AdmissionRequestError, shown
from agent.extender.claimtemplates import (
    BITSTREAM_PARAMETER,
    CARD_CLASS,
    DRIVER,
    MAX_ALTERNATIVES,
    MAX_CONFIGS,
    MAX_REQUESTS,
    SLOT_CLASSES,
)
from agent.extender.table import StateTable
from agent.files.bitstream import CARD_SCOPE, SLOT_SCOPE, is_valid_name
from agent.slots.bitstreamrequest import BITSTREAM_ANNOTATION, claim_bitstream, pod_spec_bitstreams

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


#: (where, value, scope): a bitstream an object names, and what it must be an image for (None: cannot tell).
Named = tuple[str, object, str | None]


def bitstreams_named(request: Mapping[str, Any]) -> Iterator[Named]:
    """What the request's object names (:data:`Named`); for an UPDATE only what its old object did not."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return
    named = _named_in(request.get("kind"), request.get("object"))
    if operation == "CREATE":
        yield from named
        return
    before = {repr(entry[1:]) for entry in _named_in(request.get("kind"), request.get("oldObject"))}
    yield from (entry for entry in named if repr(entry[1:]) not in before)


def _named_in(kind: object, obj: object) -> Iterator[Named]:
    if not isinstance(obj, Mapping) or not isinstance(kind, Mapping):
        return
    group, name = kind.get("group"), kind.get("kind")
    if group == "resource.k8s.io" and name == "ResourceClaim":
        yield from _in_configs(_at(obj, "spec", "devices"), "spec.devices")
    elif group == "resource.k8s.io" and name == "ResourceClaimTemplate":
        yield from _in_configs(_at(obj, "spec", "spec", "devices"), "spec.spec.devices")
    elif group == "" and name == "Pod":
        yield from _in_pod(obj)


def _at(obj: Mapping[str, Any], *keys: str) -> object:
    value: object = obj
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _in_configs(devices: object, where: str) -> Iterator[Named]:
    configs = _at(devices, "config") if isinstance(devices, Mapping) else None
    if not isinstance(devices, Mapping) or not isinstance(configs, list):
        return
    classes = _request_classes(devices)
    for index, config in enumerate(configs[:MAX_CONFIGS]):
        opaque = config.get("opaque") if isinstance(config, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER:
            continue
        parameters = opaque.get("parameters")
        value = claim_bitstream(parameters) if isinstance(parameters, Mapping) else None
        if value is not None:
            scope = _scope_of(config.get("requests"), classes)
            yield f"{where}.config[{index}].opaque.parameters.{BITSTREAM_PARAMETER}", value, scope


def _request_classes(devices: Mapping[str, Any]) -> dict[str, frozenset[str | None]]:
    """Request (and ``request/subrequest``) name -> the device classes it may be given (None: unreadable)."""
    requests = devices.get("requests")
    classes: dict[str, frozenset[str | None]] = {}
    for request in requests[:MAX_REQUESTS] if isinstance(requests, list) else ():
        name = request.get("name") if isinstance(request, Mapping) else None
        if not isinstance(name, str):
            continue
        exactly, alternatives = request.get("exactly"), request.get("firstAvailable")
        if isinstance(exactly, Mapping):
            classes[name] = frozenset([_class_of(exactly)])
        elif isinstance(alternatives, list):
            subs = [a for a in alternatives[:MAX_ALTERNATIVES] if isinstance(a, Mapping)]
            for sub in subs:
                if isinstance(sub.get("name"), str):
                    classes[f"{name}/{sub['name']}"] = frozenset([_class_of(sub)])
            classes[name] = frozenset(_class_of(sub) for sub in subs)
    return classes


def _class_of(request: Mapping[str, Any]) -> str | None:
    name = request.get("deviceClassName")
    return name if isinstance(name, str) else None


def _scope_of(applies_to: object, classes: Mapping[str, frozenset[str | None]]) -> str | None:
    """What a config's bitstream must be an image for: ``card`` when all its requests ask for fpga-card, ``slot``
    when all ask for shipped slot classes; None otherwise (prepare checks then)."""
    if applies_to is None or applies_to == []:
        names: list[object] = list(classes)
    elif isinstance(applies_to, list):
        names = applies_to[:MAX_REQUESTS]
    else:
        return None
    asked: set[str | None] = set()
    for name in names:
        if not isinstance(name, str) or name not in classes:
            return None
        asked |= classes[name]
    if not asked or None in asked:
        return None
    if asked == {CARD_CLASS}:
        return CARD_SCOPE
    return SLOT_SCOPE if asked <= SLOT_CLASSES else None


def _in_pod(pod: Mapping[str, Any]) -> Iterator[Named]:
    claims = bool(_at(pod, "spec", "resourceClaims"))
    for key, value in pod_spec_bitstreams(pod):
        # An extended-resource slot is never a whole card; the pod-wide annotation may name a claim's image too.
        yield f"annotation {key}", value, None if claims and key == BITSTREAM_ANNOTATION else SLOT_SCOPE


def refusal(request: Mapping[str, Any], known: StateTable) -> str | None:
    """Why the request's object must be refused; None when it may be admitted."""
    for where, value, scope in bitstreams_named(request):
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
        declared = known.bitstream_scope(value)
        if scope is not None and declared is not None and declared != scope:
            return f"bitstream {shown(value)} ({where}) {_SCOPE_MISMATCH[declared]}"
    return None


#: Why an image of the declared scope cannot serve the requests, by the declared scope.
_SCOPE_MISMATCH = {
    CARD_SCOPE: (
        "is declared an image for a whole card (its FpgaBitstream's spec.scope), but the requests it configures "
        f"ask for slots: ask for a card of class {CARD_CLASS}, or name an image for one slot"
    ),
    SLOT_SCOPE: (
        "is declared an image for one slot (its FpgaBitstream's spec.scope), but the requests it configures ask "
        f"for whole cards (class {CARD_CLASS}): name an image declared with spec.scope card"
    ),
}


def review_answer(request: Mapping[str, Any], known: StateTable) -> bytes:
    """The AdmissionReview answer to ``request`` (from :func:`parse_review`), as one JSON body."""
    reason = refusal(request, known)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": reason is None}
    if reason is not None:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": reason}
        logger.info("admission: refused %s %s: %s", _at(request, "kind", "kind"), _name_of(request), reason)
    elif not known.bitstreams_listed and next(bitstreams_named(request), None) is not None:
        response["warnings"] = [
            "fpga-slot: bitstream not checked (the extender has not listed the nodes' catalogs and the "
            "FpgaBitstream objects yet); an unknown one fails at NodePrepareResources"
        ]
    review = {"apiVersion": ADMISSION_VERSION, "kind": "AdmissionReview", "response": response}
    return json.dumps(review, separators=(",", ":")).encode()


def _name_of(request: Mapping[str, Any]) -> str:
    """namespace/name, quoted (a pod made from generateName has no name yet)."""
    namespace, name = request.get("namespace"), request.get("name") or _at(request, "object", "metadata", "name")
    return shown(f"{namespace or ''}/{name or '(generated)'}")


def validator(known: StateTable) -> Callable[[bytes], tuple[int, bytes]]:
    """``body -> (HTTP status, JSON body)``: the AdmissionReview answer, or 400 with an ``Error``."""

    def validate(body: bytes) -> tuple[int, bytes]:
        try:
            request = parse_review(body)
        except AdmissionRequestError as exc:
            return 400, json.dumps({"Error": str(exc)}).encode()
        return 200, review_answer(request, known)

    return validate

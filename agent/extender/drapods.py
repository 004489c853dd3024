"""DRA pods: what a pod with ``spec.resourceClaims`` asks for, read through its templates (docs/dra.md).

With the annotation ``example.com/fpga-bitstream``: that bitstream in as many slots as its templates'
FPGA requests add up to (1 when none is known); otherwise each FPGA request's own bitstream, in
allocation order. A claim named directly adds nothing unless annotated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.extender.claimtemplates import MAX_NAME_CHARS, TemplateLookup
from agent.extender.demand import DraRequest, PodDemand

#: Claims read of one pod at most (the API server allows 32); the others add nothing.
MAX_POD_CLAIMS = 32


@dataclass(frozen=True, slots=True)
class DraPod:
    """What the extender reads of a DRA pod: its name, namespace, annotation and claims' templates."""

    pod: str
    namespace: str
    #: The pod's ``example.com/fpga-bitstream`` annotation, if any.
    bitstream: str | None
    #: Per claim, in order: the template it is made from; None for a claim named directly (or unreadable).
    templates: tuple[str | None, ...]


def read_dra_pod(pod: str, namespace: str, spec: Mapping[str, Any], bitstream: str | None) -> DraPod | None:
    """The pod's claims (``spec.resourceClaims``), else None; never raises (a bad entry is an unknown claim)."""
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list) or not claims:
        return None
    templates: list[str | None] = []
    for claim in claims[:MAX_POD_CLAIMS]:
        template = claim.get("resourceClaimTemplateName") if isinstance(claim, dict) else None
        usable = isinstance(template, str) and 0 < len(template) <= MAX_NAME_CHARS
        templates.append(template if usable else None)
    return DraPod(pod, namespace, bitstream, tuple(templates))


def dra_demand(pod: DraPod, lookup: TemplateLookup) -> PodDemand:
    """The pod's demand from its templates (see the module docstring); no requests when nothing is known."""
    per_template: list[tuple[tuple[str | None, int, bool], ...]] = []
    for name in pod.templates:
        template = lookup(pod.namespace, name) if name is not None else None
        if template is None or template.error is not None:
            continue
        ours = [r for r in template.requests if r.ours]
        per_template.append(tuple((r.bitstream, r.count, r.whole_card) for r in (ours or template.requests)))
    if pod.bitstream is not None:
        slots = sum(count for requests in per_template for _, count, _ in requests) if per_template else 1
        return PodDemand.of_claims(pod.pod, [(pod.bitstream, slots)])
    named = [
        DraRequest(bitstream, count, whole)
        for requests in per_template
        for bitstream, count, whole in requests
        if bitstream is not None
    ]
    return PodDemand.of_claims(pod.pod, named)

"""What a DRA pod asks for: its annotation or its claims' templates, read once per template, never trusted."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from agent.extender.claimtemplates import (
    MAX_REQUESTS,
    MAX_SLOTS_PER_REQUEST,
    MAX_TEMPLATES,
    ClaimTemplate,
    ClaimTemplates,
    TemplateRequest,
    parse_claim_template,
)
from agent.extender.demand import DraRequest
from agent.extender.wire import BITSTREAM_ANNOTATION, parse_extender_args

EXAMPLES = Path(__file__).parents[3] / "daemonset" / "examples" / "dra"


def shipped(name: str) -> dict[str, Any]:
    """A ResourceClaimTemplate of the shipped examples, as the API server lists it (with a namespace)."""
    (template,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d["kind"] == "ResourceClaimTemplate"]
    template["metadata"].update(namespace="default", resourceVersion="7")
    loaded: dict[str, Any] = template
    return loaded


def template(*requests: dict[str, Any], config: list[dict[str, Any]] | None = None, name: str = "t") -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if config is not None:
        devices["config"] = config
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"spec": {"devices": devices}}}


def opaque(bitstream: object, *requests: str, driver: str = "fpga.example.com") -> dict[str, Any]:
    entry: dict[str, Any] = {"opaque": {"driver": driver, "parameters": {"bitstream": bitstream}}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def exactly(name: str, count: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "fpga-slot"}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def test_the_shipped_cached_first_template_asks_one_slot_of_its_bitstream() -> None:
    parsed = parse_claim_template(shipped("cached-first.yaml"))
    assert parsed == ClaimTemplate(
        "default", "fpga-slot-aes-cached-first", "7", (TemplateRequest("fpga", 1, "aes-v1", True),)
    )


def test_the_shipped_whole_card_template_asks_one_whole_card_of_its_image() -> None:
    (request,) = parse_claim_template(shipped("whole-card.yaml")).requests
    assert request == TemplateRequest("card", 1, "sim-card-v1", True, whole_card=True)
    (slot_request,) = parse_claim_template(shipped("one-slot.yaml")).requests
    assert slot_request.whole_card is False


def test_the_shipped_two_slot_template_asks_two() -> None:
    (request,) = parse_claim_template(shipped("two-slots-one-card.yaml")).requests
    assert (request.count, request.ours) == (2, True)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            template(exactly("a", 3), config=[opaque("aes")]), [TemplateRequest("a", 3, "aes", True)], id="count"
        ),
        pytest.param(
            template(
                {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c", "count": 2}, {"name": "y"}]},
                config=[opaque("aes", "a/x")],
            ),
            [TemplateRequest("a", 2, "aes", True)],
            id="first-alternative-count-and-subrequest-config",
        ),
        pytest.param(
            template(exactly("a"), exactly("gpu"), config=[opaque("aes", "a"), opaque("x", "gpu", driver="gpu.io")]),
            [TemplateRequest("a", 1, "aes", True), TemplateRequest("gpu", 1, None, False)],
            id="another-drivers-request",
        ),
        pytest.param(
            template(exactly("a"), config=[opaque("aes"), {"opaque": {"driver": "fpga.example.com"}}, opaque("sha")]),
            [TemplateRequest("a", 1, "sha", True)],
            id="the-later-config-wins-a-config-without-bitstream-changes-nothing",
        ),
        pytest.param(template(exactly("a")), [TemplateRequest("a", 1, None, False)], id="no-config"),
    ],
)
def test_requests_counts_and_bitstreams(obj: dict[str, Any], expected: list[TemplateRequest]) -> None:
    parsed = parse_claim_template(obj)
    assert parsed.error is None
    assert list(parsed.requests) == expected


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        pytest.param(template(exactly("a", 0)), "count must be an integer from 1 to", id="zero"),
        pytest.param(template(exactly("a", MAX_SLOTS_PER_REQUEST + 1)), "count must be", id="too-many-slots"),
        pytest.param(template(exactly("a", True)), "count must be", id="boolean-count"),  # type: ignore[arg-type]
        pytest.param(
            template({"name": "a", "exactly": {"allocationMode": "All"}}), "allocationMode All", id="all-devices"
        ),
        pytest.param(template(*[exactly(f"r{i}") for i in range(MAX_REQUESTS + 1)]), "more than", id="many-requests"),
        pytest.param(template({"name": "a"}), "neither exactly nor firstAvailable", id="no-kind"),
        pytest.param(template({"name": "a", "firstAvailable": []}), "firstAvailable is empty", id="no-alternatives"),
        pytest.param(template(exactly("a"), config=[opaque(7)]), "must be a bitstream name", id="bitstream-number"),
        pytest.param(template(exactly("a"), config=[opaque("x" * 254)]), "must be a bitstream name", id="long-name"),
        pytest.param(template(exactly("a" * 300)), "must be a name of 1 to 253", id="long-request-name"),
        pytest.param({"metadata": {"name": "t", "namespace": "d"}, "spec": []}, "spec must be an object", id="spec"),
        pytest.param(
            {"metadata": {"name": "t", "namespace": "d"}, "spec": {"spec": {"devices": {"requests": {}}}}},
            "requests must be a list",
            id="requests-object",
        ),
    ],
)
def test_a_bad_template_is_kept_with_its_error_and_said_once(
    obj: dict[str, Any], error: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    obj["metadata"].update(name=request.node.callspec.id, resourceVersion="5")  # said once per template and version
    with caplog.at_level(logging.WARNING, "agent.extender.claimtemplates"):
        first = parse_claim_template(obj)
        again = parse_claim_template(copy.deepcopy(obj))
    assert first == again
    assert first.requests == ()
    assert first.error is not None
    assert error in first.error
    assert len([r for r in caplog.records if "is not read" in r.getMessage()]) == 1


def test_an_object_without_a_name_is_skipped() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        parse_claim_template({"metadata": {"namespace": "default"}})
    with pytest.raises(ValueError, match="namespace"):
        parse_claim_template({"metadata": {"name": "t"}})


def test_the_cache_follows_lists_and_events_and_stays_bounded() -> None:
    templates = ClaimTemplates(limit=2)
    a, b, c = (ClaimTemplate("default", name) for name in "abc")
    templates.replace([a, b, c])
    assert len(templates) == 2
    assert templates.get("default", "c") is None
    templates.apply("ADDED", c)
    assert templates.get("default", "c") is None  # full
    templates.apply("DELETED", a)
    templates.apply("ADDED", c)
    assert templates.get("default", "c") == c
    changed = ClaimTemplate("default", "b", "2")
    templates.apply("MODIFIED", changed)
    assert templates.get("default", "b") == changed
    assert MAX_TEMPLATES >= 1000


# --- the pod ------------------------------------------------------------------------------


def request_for(pod_spec: dict[str, Any], annotations: dict[str, str] | None = None, namespace: str = "team") -> bytes:
    pod = {"metadata": {"name": "p", "namespace": namespace, "annotations": annotations or {}}, "spec": pod_spec}
    return orjson.dumps({"Pod": pod, "NodeNames": ["n"]})


def claims(*entries: dict[str, str]) -> dict[str, Any]:
    return {"containers": [{"name": "main"}], "resourceClaims": list(entries)}


def lookup_in(*parsed: ClaimTemplate) -> ClaimTemplates:
    templates = ClaimTemplates()
    templates.replace(parsed)
    return templates


AES2 = ClaimTemplate("team", "aes2", "", (TemplateRequest("fpga", 2, "aes", True),))
SHA1 = ClaimTemplate(
    "team", "sha1", "", (TemplateRequest("fpga", 1, "sha", True), TemplateRequest("g", 1, None, False))
)
OTHER = ClaimTemplate("team", "gpu", "", (TemplateRequest("g", 3, None, False),))
BROKEN = ClaimTemplate("team", "bad", "", (), "count must be an integer")


@pytest.mark.parametrize(
    ("entries", "annotations", "expected"),
    [
        pytest.param([{"name": "f", "resourceClaimTemplateName": "aes2"}], None, (("aes", 2),), id="template"),
        pytest.param(
            [{"name": "a", "resourceClaimTemplateName": "aes2"}, {"name": "b", "resourceClaimTemplateName": "sha1"}],
            None,
            (("aes", 2), ("sha", 1)),
            id="claims-in-order",
        ),
        pytest.param(
            [{"name": "f", "resourceClaimTemplateName": "sha1"}],
            {BITSTREAM_ANNOTATION: "gz"},
            (("gz", 1),),
            id="annotation-wins-count-from-the-fpga-requests",
        ),
        pytest.param(
            [{"name": "f", "resourceClaimTemplateName": "gpu"}],
            {BITSTREAM_ANNOTATION: "gz"},
            (("gz", 3),),
            id="annotation-count-from-a-template-without-fpga-config",
        ),
        pytest.param(
            [{"name": "f", "resourceClaimName": "mine"}],
            {BITSTREAM_ANNOTATION: "gz"},
            (("gz", 1),),
            id="named-annotated",
        ),
        pytest.param([{"name": "f", "resourceClaimName": "mine"}], None, (), id="named-neutral"),
        pytest.param([{"name": "f", "resourceClaimTemplateName": "missing"}], None, (), id="unknown-template-neutral"),
        pytest.param([{"name": "f", "resourceClaimTemplateName": "bad"}], None, (), id="broken-template-neutral"),
        pytest.param([{"name": "f", "resourceClaimTemplateName": "gpu"}], None, (), id="no-bitstream-neutral"),
        pytest.param(["garbage", {"resourceClaimTemplateName": 7}], None, (), id="malformed-entries-neutral"),
        pytest.param(
            [{"name": "f", "resourceClaimTemplateName": "x" * 300}], None, (), id="overlong-template-name-neutral"
        ),
    ],
)
def test_a_dra_pods_demand(
    entries: list[Any], annotations: dict[str, str] | None, expected: tuple[tuple[str, int], ...]
) -> None:
    request = parse_extender_args(request_for(claims(*entries), annotations), lookup_in(AES2, SHA1, OTHER, BROKEN).get)
    assert request.demand.dra == tuple(DraRequest(*e) for e in expected)
    assert request.demand.pod == "team/p"


def test_templates_are_looked_up_in_the_pods_namespace() -> None:
    body = request_for(claims({"name": "f", "resourceClaimTemplateName": "aes2"}), namespace="other")
    demand = parse_extender_args(body, lookup_in(AES2).get).demand
    assert (demand.pod, demand.dra) == ("other/p", ())


def test_a_pod_without_claims_is_not_a_dra_pod() -> None:
    assert parse_extender_args(request_for({"containers": [{"name": "main"}]})).demand.dra is None
    body = request_for({"containers": [{"name": "main"}], "resourceClaims": []})
    assert parse_extender_args(body).demand.dra is None

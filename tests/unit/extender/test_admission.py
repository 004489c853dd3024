"""The admission check: what a claim, template or pod asks for, against what the node cache knows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import AdmissionRequestError
from agent.extender.admission import (
    HOW_TO_DECLARE,
    bitstreams_named,
    parse_review,
    refusal,
    review_answer,
    validator,
)
from agent.extender.nodestate import WatchedNode
from agent.extender.table import StateTable
from tests.integration.extender.test_malformed import json_values
from tests.unit.extender.factories import PAC, node, slot

DRIVER = "fpga.example.com"


@dataclass(frozen=True)
class Declared:
    name: str
    platform: str
    scope: str = "slot"


def configs(*bitstreams: object, driver: str = DRIVER) -> list[dict[str, Any]]:
    """One opaque config per bitstream (for ``driver``), as a claim's ``devices.config``."""
    return [{"requests": ["fpga"], "opaque": {"driver": driver, "parameters": {"bitstream": b}}} for b in bitstreams]


def claim(*bitstreams: object, driver: str = DRIVER) -> dict[str, Any]:
    devices = {"requests": [{"name": "fpga", "exactly": {"deviceClassName": "fpga-slot"}}]}
    if bitstreams:
        devices["config"] = configs(*bitstreams, driver=driver)
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": devices}}


def template(*bitstreams: object) -> dict[str, Any]:
    return {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"spec": claim(*bitstreams)["spec"]}}


def pod(annotations: dict[str, str], containers: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
        "spec": {
            "containers": [{"name": c, "resources": {"limits": {"example.com/fpga-slot": "1"}}} for c in containers]
        },
    }


KINDS = {
    "ResourceClaim": ("resource.k8s.io", "v1", "ResourceClaim"),
    "ResourceClaimTemplate": ("resource.k8s.io", "v1", "ResourceClaimTemplate"),
    "Pod": ("", "v1", "Pod"),
}


def request(obj: dict[str, Any] | None, kind: str, operation: str = "CREATE") -> dict[str, Any]:
    group, version, name = KINDS[kind]
    return {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": version, "kind": name},
        "operation": operation,
        "object": obj,
    }


def review(req: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}).encode()


@pytest.fixture
def cache() -> StateTable:
    """Node a's catalog holds aes and sha; the cluster declares pulled-v1."""
    known = StateTable()
    known.replace_watched([WatchedNode("a", node("a", [slot("s0")], {"aes": PAC, "sha": PAC}))])
    known.replace_declared([Declared("pulled-v1", PAC)])
    return known


# ------------------------------------------------------------------------------------ what is read
@pytest.mark.parametrize(
    ("obj", "kind", "expected"),
    [
        pytest.param(claim("aes"), "ResourceClaim",
                     [("spec.devices.config[0].opaque.parameters.bitstream", "aes", "slot")], id="claim"),
        pytest.param(template("aes", "x"), "ResourceClaimTemplate",
                     [("spec.spec.devices.config[0].opaque.parameters.bitstream", "aes", "slot"),
                      ("spec.spec.devices.config[1].opaque.parameters.bitstream", "x", "slot")],
                     id="template-two-configs"),
        pytest.param(claim(), "ResourceClaim", [], id="claim-without-config"),
        pytest.param(claim("aes", driver="gpu.example.com"), "ResourceClaim", [], id="another-driver"),
        pytest.param(template(), "ResourceClaimTemplate", [], id="template-without-config"),
        pytest.param(pod({"example.com/fpga-bitstream": "aes"}), "Pod", [("annotation example.com/fpga-bitstream",
                     "aes", "slot")], id="pod"),
        pytest.param(pod({"example.com/fpga-bitstream.side": "x", "example.com/fpga-bitstream.gone": "y"},
                         ("main", "side")), "Pod", [("annotation example.com/fpga-bitstream.side", "x", "slot")],
                     id="pod-per-container-of-its-own-containers-only"),
        pytest.param(pod({"other": "x"}), "Pod", [], id="pod-without-bitstream"),
        pytest.param({"spec": "not an object"}, "ResourceClaim", [], id="odd-shape"),
    ],
)  # fmt: skip
def test_the_bitstreams_an_object_names(obj: dict[str, Any], kind: str, expected: list[tuple[str, str, str]]) -> None:
    assert list(bitstreams_named(request(obj, kind))) == expected


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_deletes_and_connects_name_nothing(operation: str) -> None:
    assert list(bitstreams_named(request(claim("x"), "ResourceClaim", operation))) == []


def test_an_unknown_kind_names_nothing() -> None:
    req = request(claim("x"), "ResourceClaim") | {"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}}
    assert list(bitstreams_named(req)) == []


# ------------------------------------------------------------------------------------ the decision
@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        pytest.param(claim("aes"), "ResourceClaim", id="in-a-catalog"),
        pytest.param(template("pulled-v1"), "ResourceClaimTemplate", id="declared"),
        pytest.param(claim(), "ResourceClaim", id="no-bitstream"),
        pytest.param(claim("nope", driver="gpu.example.com"), "ResourceClaim", id="another-driver"),
        pytest.param(pod({"example.com/fpga-bitstream": "sha"}), "Pod", id="pod-known"),
        pytest.param(claim(None), "ResourceClaim", id="bitstream-null"),
        pytest.param(template(None), "ResourceClaimTemplate", id="template-bitstream-null"),
        pytest.param(pod({"example.com/fpga-bitstream": "nope", "example.com/fpga-bitstream.main": "aes"}), "Pod",
                     id="unused-pod-annotation"),
        pytest.param(pod({"example.com/fpga-bitstream.side": "nope"}) | {"spec": {"containers": [
                         {"name": "main", "resources": {"limits": {"example.com/fpga-slot": "1"}}},
                         {"name": "side"}]}}, "Pod", id="container-asking-no-slot"),
    ],
)  # fmt: skip
def test_known_bitstreams_and_objects_without_one_are_admitted(
    cache: StateTable, obj: dict[str, Any], kind: str
) -> None:
    assert refusal(request(obj, kind), cache) is None


@pytest.mark.parametrize(
    ("obj", "kind", "where"),
    [
        pytest.param(claim("aes", "nope"), "ResourceClaim", "spec.devices.config[1].opaque.parameters.bitstream",
                     id="claim"),
        pytest.param(template("nope"), "ResourceClaimTemplate",
                     "spec.spec.devices.config[0].opaque.parameters.bitstream", id="template"),
        pytest.param(pod({"example.com/fpga-bitstream": "aes", "example.com/fpga-bitstream.main": "nope"}), "Pod",
                     "annotation example.com/fpga-bitstream.main", id="pod-container-override"),
    ],
)  # fmt: skip
def test_an_unknown_bitstream_is_refused_naming_it_where_and_how_to_declare_it(
    cache: StateTable, obj: dict[str, Any], kind: str, where: str
) -> None:
    reason = refusal(request(obj, kind), cache)
    assert reason is not None
    assert reason.startswith(f"bitstream 'nope' ({where}) is unknown: no node's catalog holds it")
    assert reason.endswith(HOW_TO_DECLARE)
    assert "\n" not in reason


# ------------------------------------------------------------------------------------ slot or whole card
def card_claim(bitstream: str, requests: list[dict[str, Any]], applies_to: list[str] | None = None) -> dict[str, Any]:
    """A claim with ``requests`` and one config naming ``bitstream`` (for ``applies_to``; None: every request)."""
    config: dict[str, Any] = {"opaque": {"driver": DRIVER, "parameters": {"bitstream": bitstream}}}
    if applies_to is not None:
        config["requests"] = applies_to
    devices = {"requests": requests, "config": [config]}
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": devices}}


CARD = {"name": "card", "exactly": {"deviceClassName": "fpga-card"}}
SLOT = {"name": "fpga", "exactly": {"deviceClassName": "fpga-slot"}}
EITHER = {"name": "either", "firstAvailable": [{"name": "whole", "deviceClassName": "fpga-card"},
                                               {"name": "one", "deviceClassName": "fpga-slot"}]}  # fmt: skip


@pytest.fixture
def scoped() -> StateTable:
    """Node a holds aes (no declaration); the cluster declares full-v1 a card image and pulled-v1 a slot image."""
    known = StateTable()
    known.replace_watched([WatchedNode("a", node("a", [slot("s0")], {"aes": PAC}))])
    known.replace_declared([Declared("full-v1", PAC, "card"), Declared("pulled-v1", PAC)])
    return known


@pytest.mark.parametrize(
    ("obj", "kind", "refused"),
    [
        pytest.param(card_claim("full-v1", [SLOT]), "ResourceClaim", "card", id="card-image-for-a-slot"),
        pytest.param(card_claim("pulled-v1", [CARD]), "ResourceClaim", "slot", id="slot-image-for-a-card"),
        pytest.param({"metadata": {"name": "t"}, "spec": {"spec": card_claim("pulled-v1", [CARD])["spec"]}},
                     "ResourceClaimTemplate", "slot", id="template"),
        pytest.param(card_claim("full-v1", [CARD, SLOT], ["fpga"]), "ResourceClaim", "card", id="config-for-one"),
        pytest.param(card_claim("full-v1", [EITHER], ["either/one"]), "ResourceClaim", "card", id="subrequest"),
        pytest.param(pod({"example.com/fpga-bitstream": "full-v1"}), "Pod", "card", id="pod-asks-slots"),
        pytest.param(pod({"example.com/fpga-bitstream": "full-v1"}) | {"spec": {"containers": [{"name": "main"}],
                     "resourceClaims": [{"name": "card", "resourceClaimName": "big"}]}}, "Pod", None,
                     id="pod-wide-annotation-of-a-claim-pod"),
        pytest.param(card_claim("full-v1", [CARD]), "ResourceClaim", None, id="card-image-for-a-card"),
        pytest.param(card_claim("pulled-v1", [SLOT]), "ResourceClaim", None, id="slot-image-for-a-slot"),
        pytest.param(card_claim("full-v1", [CARD, SLOT], ["card"]), "ResourceClaim", None, id="config-for-the-card"),
        pytest.param(card_claim("full-v1", [EITHER]), "ResourceClaim", None, id="either-prepare-decides"),
        pytest.param(card_claim("full-v1", [CARD, SLOT]), "ResourceClaim", None, id="both-prepare-decides"),
        pytest.param(card_claim("full-v1", [SLOT], ["missing"]), "ResourceClaim", None, id="unknown-request"),
        pytest.param(card_claim("aes", [CARD]), "ResourceClaim", None, id="undeclared-prepare-decides"),
        pytest.param(card_claim("full-v1", [{"name": "fpga", "exactly": {"deviceClassName": "my-cards"}}]),
                     "ResourceClaim", None, id="a-class-of-the-users-prepare-decides"),
        pytest.param(card_claim("full-v1", [SLOT, {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]),
                     "ResourceClaim", None, id="config-for-another-drivers-request-too"),
        pytest.param(card_claim("full-v1", [SLOT, {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}], ["fpga"]),
                     "ResourceClaim", "card", id="config-for-the-slot-request"),
    ],
)  # fmt: skip
def test_a_declared_image_for_the_other_kind_of_device_is_refused_naming_both(
    scoped: StateTable, obj: dict[str, Any], kind: str, refused: str | None
) -> None:
    reason = refusal(request(obj, kind), scoped)
    if refused is None:
        assert reason is None
        return
    assert reason is not None
    assert f"is declared an image for {'a whole card' if refused == 'card' else 'one slot'}" in reason
    assert "fpga-card" in reason
    assert "\n" not in reason


def _places(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    places = [prefix]
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        places += _places(child, (*prefix, key))
    return places


MIXED = card_claim("full-v1", [CARD, SLOT, EITHER], ["card", "either/one"])
MIXED_PLACES = _places(MIXED)


@settings(max_examples=300, deadline=None)
@given(place=st.sampled_from(MIXED_PLACES), value=json_values)
def test_any_value_anywhere_in_a_claim_is_admitted_or_refused_with_a_reason(place: tuple[Any, ...], value: Any) -> None:
    known = StateTable()
    known.replace_watched([WatchedNode("a", node("a", [slot("s0")], {"aes": PAC}))])
    known.replace_declared([Declared("full-v1", PAC, "card")])
    obj = json.loads(json.dumps(MIXED))
    target = obj
    for key in place[:-1]:
        target = target[key]
    if place:
        target[place[-1]] = value
    else:
        obj = value
    reason = refusal(request(obj, "ResourceClaim"), known)
    assert reason is None or (reason and "\n" not in reason)


def test_a_declaration_changing_its_scope_changes_the_answer(scoped: StateTable) -> None:
    asked = request(card_claim("pulled-v1", [CARD]), "ResourceClaim")
    assert refusal(asked, scoped) is not None
    scoped.apply_declared("MODIFIED", Declared("pulled-v1", PAC, "card"))
    assert refusal(asked, scoped) is None
    scoped.apply_declared("DELETED", Declared("pulled-v1", PAC, "card"))
    assert scoped.bitstream_scope("pulled-v1") is None


@pytest.mark.parametrize("value", [42, "", "Upper", "../etc/passwd", "x" * 300])
def test_a_bitstream_parameter_that_is_no_name_is_refused(cache: StateTable, value: object) -> None:
    reason = refusal(request(claim(value), "ResourceClaim"), cache)
    assert reason is not None
    assert reason.startswith("spec.devices.config[0].opaque.parameters.bitstream must name a bitstream")
    assert len(reason) < 400


def test_a_declaration_or_a_catalog_arriving_later_makes_the_bitstream_known(cache: StateTable) -> None:
    req = request(template("later"), "ResourceClaimTemplate")
    assert refusal(req, cache) is not None
    cache.apply_declared("ADDED", Declared("later", PAC))
    assert refusal(req, cache) is None
    cache.apply_declared("DELETED", Declared("later", PAC))
    assert refusal(req, cache) is not None
    cache.apply_watched("MODIFIED", WatchedNode("b", node("b", [slot("s0")], {"later": PAC})))
    assert refusal(req, cache) is None
    cache.apply_watched("DELETED", WatchedNode("b", None))
    assert refusal(req, cache) is not None


@pytest.mark.parametrize("listed", ["nothing", "nodes-only", "declarations-only"])
def test_nothing_is_refused_as_unknown_before_nodes_and_declarations_are_both_listed(listed: str) -> None:
    cache = StateTable()
    if listed == "nodes-only":
        cache.replace_watched([WatchedNode("a", node("a", [slot("s0")], {"aes": PAC}))])
    if listed == "declarations-only":
        cache.replace_declared([])
    req = request(claim("nope"), "ResourceClaim")
    assert refusal(req, cache) is None
    answer = json.loads(review_answer(req, cache))["response"]
    assert answer["allowed"] is True
    assert "bitstream not checked" in answer["warnings"][0]
    # A malformed name needs no list to be refused.
    assert refusal(request(claim("Bad Name"), "ResourceClaim"), cache) is not None


# ------------------------------------------------------------------------------------ the review
def test_the_answer_is_an_admission_review_with_the_request_uid(cache: StateTable) -> None:
    req = request(claim("nope"), "ResourceClaim")
    answer = json.loads(review_answer(req, cache))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == req["uid"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "'nope'" in response["status"]["message"]
    allowed = json.loads(review_answer(request(claim("aes"), "ResourceClaim"), cache))["response"]
    assert allowed == {"uid": req["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"{not json", "the body is not JSON", id="not-json"),
        pytest.param(b"[1, 2]", "the body must be a JSON object", id="a-list"),
        pytest.param(b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}',
                     "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got 'admission.k8s.io/v1beta1'",
                     id="old-version"),
        pytest.param(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
                     "the AdmissionReview has no request object", id="no-request"),
        pytest.param(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}',
                     "request.uid must be a non-empty string", id="bad-uid"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "the body is not JSON", id="deeply-nested"),
    ],
)  # fmt: skip
def test_a_malformed_review_is_a_400_naming_the_problem(cache: StateTable, body: bytes, error: str) -> None:
    with pytest.raises(AdmissionRequestError, match="^" + error.replace("(", r"\(").replace(")", r"\)")):
        parse_review(body)
    status, answer = validator(cache)(body)
    assert status == 400
    assert json.loads(answer)["Error"].startswith(error)


def test_a_review_changes_nothing_in_the_cache(cache: StateTable) -> None:
    nodes, listed = dict(cache.nodes), cache.bitstreams_listed
    validate = validator(cache)
    for body in (review(request(claim("nope"), "ResourceClaim")), review(request(claim("aes"), "ResourceClaim"))):
        assert validate(body)[0] == 200
    validate(b"garbage")
    assert (dict(cache.nodes), cache.bitstreams_listed) == (nodes, listed)


def test_an_update_is_refused_only_for_a_bitstream_its_old_object_did_not_name(cache: StateTable) -> None:
    old = template("nope")
    finalized = template("nope") | {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["x"]}}
    update = request(finalized, "ResourceClaimTemplate", "UPDATE") | {"oldObject": old}
    assert list(bitstreams_named(update)) == []
    assert refusal(update, cache) is None
    changed = request(template("nope", "other"), "ResourceClaimTemplate", "UPDATE") | {"oldObject": old}
    reason = refusal(changed, cache)
    assert reason is not None
    assert reason.startswith("bitstream 'other'")
    assert refusal(request(template("nope"), "ResourceClaimTemplate", "UPDATE"), cache) is not None  # no old object


def test_the_first_list_of_declarations_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    known = StateTable()
    with caplog.at_level("INFO", logger="agent.extender.table"):
        known.replace_declared([])
        known.replace_declared([])
    assert [r.getMessage() for r in caplog.records if "listed" in r.getMessage()] == ["FpgaBitstream objects listed: 0"]

"""The webhook and the agent read "which bitstream is asked for" alike: the same pods and claims, the same answer."""

from __future__ import annotations

from typing import Any

import pytest

from agent.dra.claimprep import _bitstream, _pod_bitstream
from agent.extender.admission import bitstreams_named
from agent.kube.pods import parse_pod
from agent.node.reconfigure import wanted_bitstream
from agent.slots.bitstreamrequest import container_bitstream, pod_spec_bitstreams, slots_asked

SLOTS = {"limits": {"example.com/fpga-slot": "1"}}


def pod(annotations: dict[str, str], *containers: dict[str, Any], claims: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if claims:
        spec["resourceClaims"] = [{"name": "fpga", "resourceClaimName": "c"}]
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations}, "spec": spec}


def webhook_reads(obj: dict[str, Any]) -> set[object]:
    review = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": obj}
    return {value for _where, value, _scope in bitstreams_named(review)}


def agent_reads(obj: dict[str, Any]) -> set[object]:
    """What the device-plugin side programs for each slot container, and what DRA reads for a claim of the pod."""
    info = parse_pod(obj)
    found: set[object] = {wanted_bitstream(info, c.name) for c in info.containers + info.init_containers if c.slots}
    if obj["spec"].get("resourceClaims"):
        found.add(_pod_bitstream(info))
    return found - {None}


BITSTREAM = "example.com/fpga-bitstream"
PODS = [
    pytest.param(pod({BITSTREAM: "a"}, {"name": "main", "resources": SLOTS}), {"a"}, id="pod-wide"),
    pytest.param(
        pod({BITSTREAM: "unused", f"{BITSTREAM}.main": "a"}, {"name": "main", "resources": SLOTS}),
        {"a"},
        id="every-slot-container-has-its-own",
    ),
    pytest.param(
        pod({BITSTREAM: "p", f"{BITSTREAM}.main": "a"}, {"name": "main", "resources": SLOTS}, {"name": "x", **{}}),
        {"a"},
        id="a-container-without-slots-needs-no-pod-wide",
    ),
    pytest.param(
        pod(
            {BITSTREAM: "p", f"{BITSTREAM}.main": "a"},
            {"name": "main", "resources": SLOTS},
            {"name": "two", "resources": {"requests": {"example.com/fpga-slot": 2}}},
        ),
        {"a", "p"},
        id="pod-wide-for-the-container-without-its-own",
    ),
    pytest.param(
        pod({f"{BITSTREAM}.side": "s"}, {"name": "main", "resources": SLOTS}, {"name": "side"}),
        set(),
        id="container-asking-no-slot",
    ),
    pytest.param(
        pod({f"{BITSTREAM}.side": "s"}, {"name": "side", "resources": {"limits": {"example.com/fpga-slot": "0"}}}),
        set(),
        id="zero-slots",
    ),
    pytest.param(pod({BITSTREAM: ""}, {"name": "main", "resources": SLOTS}), set(), id="empty-is-none"),
    pytest.param(pod({BITSTREAM: "d", f"{BITSTREAM}.main": "x"}, {"name": "main"}, claims=True), {"d"}, id="claims"),
]


@pytest.mark.parametrize(("obj", "expected"), PODS)
def test_the_webhook_checks_exactly_the_bitstreams_the_agent_would_program(
    obj: dict[str, Any], expected: set[str]
) -> None:
    assert webhook_reads(obj) == agent_reads(obj) == expected


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        pytest.param({"bitstream": "aes"}, "aes", id="named"),
        pytest.param({"bitstream": None}, None, id="null-is-none"),
        pytest.param({}, None, id="absent"),
    ],
)
def test_a_claim_config_is_read_alike(parameters: dict[str, Any], expected: str | None) -> None:
    config = {"opaque": {"driver": "fpga.example.com", "parameters": parameters}}
    claim = {"spec": {"devices": {"config": [config]}}}
    review = {"uid": "u", "kind": {"group": "resource.k8s.io", "kind": "ResourceClaim"}, "operation": "CREATE"}
    webhook = [value for _where, value, _scope in bitstreams_named(review | {"object": claim})]
    assert webhook == ([] if expected is None else [expected])
    assert _bitstream(parameters, "claim ns/c") == expected


def test_reading_helpers() -> None:
    assert container_bitstream({BITSTREAM: "p", f"{BITSTREAM}.c": ""}, "c") == (BITSTREAM, "p")
    assert container_bitstream({}, "c") is None
    assert pod_spec_bitstreams(pod({BITSTREAM: "p"}, {"name": "main"})) == []
    assert slots_asked({"resources": {"limits": {"example.com/fpga-slot": "2"}, "requests": {}}}) == 2
    assert slots_asked({"resources": {"limits": {"example.com/fpga-slot": "lots"}}}) == 0
    assert slots_asked("not a container") == 0

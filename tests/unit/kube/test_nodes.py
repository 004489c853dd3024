"""The pure part of node publishing: which keys the agent owns, which labels it wants, the minimal merge patch
(which also removes the slot state annotations earlier versions kept on the Node)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.kube.nodefields import (
    PLATFORM_LABEL,
    PLATFORM_LABEL_PREFIX,
    OwnedFields,
    is_label_name,
    owned_fields,
    patch_body,
    platform_labels,
)

P = PLATFORM_LABEL_PREFIX
SLOTS_ANNOTATION = "example.com/fpga-slots"  # as earlier versions wrote them on the Node
BITSTREAMS_ANNOTATION = "example.com/fpga-bitstreams"


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        pytest.param("sim-pr-v1", True, id="dashes"),
        pytest.param("a", True, id="one-char"),
        pytest.param("A.b_c-D9", True, id="mixed-case-dot-underscore"),
        pytest.param("ce48969a6b3b5d0f9bdeb2b4a1e6a2c1", True, id="dfl-interface-id"),
        pytest.param("a" * 63, True, id="63-chars"),
        pytest.param("a" * 64, False, id="64-chars"),
        pytest.param("", False, id="empty"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("a.", False, id="trailing-dot"),
        pytest.param("Xilinx ZynqMP FPGA Manager", False, id="spaces"),
        pytest.param("a/b", False, id="slash"),
        pytest.param("ünïcode", False, id="non-ascii"),
    ],
)
def test_is_label_name(text: str, valid: bool) -> None:
    assert is_label_name(text) is valid


@pytest.mark.parametrize(
    ("platforms", "labels"),
    [
        pytest.param(set(), {}, id="none"),
        pytest.param({"p1"}, {P + "p1": "true", PLATFORM_LABEL: "p1"}, id="one"),
        pytest.param({"p1", "p2"}, {P + "p1": "true", P + "p2": "true"}, id="two"),
        pytest.param({"bad platform"}, {}, id="one-invalid"),
        pytest.param({"bad platform", "p1"}, {P + "p1": "true"}, id="invalid-still-counts-as-a-second-platform"),
    ],
)
def test_platform_labels(platforms: set[str], labels: dict[str, str]) -> None:
    assert platform_labels(platforms) == labels


def test_owned_fields_keeps_only_the_agents_keys() -> None:
    node = {
        "metadata": {
            "name": "n",
            "annotations": {SLOTS_ANNOTATION: "[]", BITSTREAMS_ANNOTATION: "{}", "other": "x", "example.com/y": "z"},
            "labels": {PLATFORM_LABEL: "p", P + "p": "true", "kubernetes.io/hostname": "n", "example.com/x": "1"},
        }
    }
    assert owned_fields(node) == OwnedFields(
        {SLOTS_ANNOTATION: "[]", BITSTREAMS_ANNOTATION: "{}"}, {PLATFORM_LABEL: "p", P + "p": "true"}
    )
    assert owned_fields({"metadata": {"name": "n"}}) == OwnedFields()
    assert owned_fields({}) == OwnedFields()


WANT = OwnedFields({}, {P + "a": "true", PLATFORM_LABEL: "a"})


@pytest.mark.parametrize(
    ("current", "patch"),
    [
        pytest.param(WANT, None, id="equal-no-patch"),
        pytest.param(OwnedFields(), {"metadata": {"labels": {P + "a": "true", PLATFORM_LABEL: "a"}}}, id="fresh-node"),
        pytest.param(
            OwnedFields({SLOTS_ANNOTATION: "[0]", BITSTREAMS_ANNOTATION: "{}"}, WANT.labels),
            {"metadata": {"annotations": {SLOTS_ANNOTATION: None, BITSTREAMS_ANNOTATION: None}}},
            id="earlier-versions-annotations-removed",
        ),
        pytest.param(
            OwnedFields({}, {P + "a": "true", P + "old": "true", PLATFORM_LABEL: "old"}),
            {"metadata": {"labels": {PLATFORM_LABEL: "a", P + "old": None}}},
            id="stale-label-nulled",
        ),
    ],
)
def test_patch_body_sends_only_what_differs(current: OwnedFields, patch: dict[str, Any] | None) -> None:
    assert patch_body(WANT, current) == patch

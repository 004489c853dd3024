"""OCI references: parsed into registry, repository, tag and digest; refused with the expected form named."""

from __future__ import annotations

import pytest
import yaml

from agent.bitstreams.reference import REFERENCE_PATTERN, Reference, parse_reference
from agent.errors import CatalogError
from tests.deploy.manifests import DAEMONSET_DIR

DIGEST = "sha256:" + "0f" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("localhost:5000/nlb:1.0", Reference("localhost:5000", "nlb", "1.0", None), id="tag"),
        pytest.param(
            f"r.example.com/fpga/nlb@{DIGEST}", Reference("r.example.com", "fpga/nlb", None, DIGEST), id="digest"
        ),
        pytest.param(f"127.0.0.1:5/a/b_c:v@{DIGEST}", Reference("127.0.0.1:5", "a/b_c", "v", DIGEST), id="tag+digest"),
        pytest.param("registry:5000/x:latest", Reference("registry:5000", "x", "latest", None), id="short-host-port"),
        pytest.param("[::1]:5000/x:1", Reference("[::1]:5000", "x", "1", None), id="ipv6"),
    ],
)
def test_references_parse(text: str, expected: Reference) -> None:
    assert parse_reference(text) == expected
    assert str(expected) == text


def test_a_digest_pins_the_manifest() -> None:
    assert parse_reference(f"r.io/x:1@{DIGEST}").manifest == DIGEST
    assert parse_reference("r.io/x:1").manifest == "1"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("nlb:1.0", id="no-registry"),
        pytest.param("registry/x:1", id="host-without-dot-or-port"),
        pytest.param("r.io/x", id="no-tag-or-digest"),
        pytest.param("r.io/X:1", id="upper-case-repository"),
        pytest.param("r.io/x@sha256:00", id="short-digest"),
        pytest.param("https://r.io/x:1", id="scheme"),
        pytest.param("r.io/x:1\n", id="newline"),
        pytest.param("r.io/" + "x" * 1100 + ":1", id="too-long"),
    ],
)
def test_bad_references_are_refused_with_the_expected_form(text: str) -> None:
    with pytest.raises(CatalogError, match="expected registry"):
        parse_reference(text)


def test_the_crd_takes_the_same_references() -> None:
    crd = yaml.safe_load((DAEMONSET_DIR / "fpgabitstream-crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["source"]["properties"]["oci"]["pattern"] == REFERENCE_PATTERN

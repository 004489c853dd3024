"""FpgaBitstream objects read as Declarations: checked again as the CRD checks them, ids normalised."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from agent.bitstreams.declaration import (
    ACCELERATOR_ID_PATTERN,
    URL_PATTERN,
    Credentials,
    declaration_object,
    parse_declaration,
    redacted_url,
)
from agent.bitstreams.reference import parse_reference
from agent.errors import CatalogError
from tests.deploy.manifests import DAEMONSET_DIR, load_documents

SHA = "12" * 32


def obj(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "example.com/v1alpha1",
        "kind": "FpgaBitstream",
        "metadata": {"name": "nlb", "uid": "u-1", "resourceVersion": "7"},
        "spec": {
            "platform": "9A3D7C8E-1111-4F0A-8D1B-0123456789AB",
            "acceleratorId": "sim-accel",
            "sha256": SHA,
            "size": 10,
            "source": {"oci": "localhost:5000/fpga/nlb:1", "pullSecret": "creds"},
        },
    }
    base["spec"].update(spec)
    return base


def test_a_declaration_is_read_and_normalised() -> None:
    declaration = parse_declaration(obj())
    assert declaration.name == "nlb"
    assert declaration.platform == "9a3d7c8e11114f0a8d1b0123456789ab"
    assert declaration.accelerator_id == "sim-accel"
    assert declaration.oci == parse_reference("localhost:5000/fpga/nlb:1")
    assert declaration.https is None
    assert declaration.pull_secret == "creds"
    assert declaration.prefetch is False
    assert declaration.scope == "slot"
    assert declaration.source == "oci://localhost:5000/fpga/nlb:1"


def test_the_printed_object_reads_back_the_same() -> None:
    declaration = parse_declaration(obj(prefetch=True))
    again = parse_declaration(declaration_object(declaration))
    assert again == declaration
    card = parse_declaration(obj(scope="card"))
    assert card.scope == "card"
    assert declaration_object(card)["spec"]["scope"] == "card"
    assert parse_declaration(declaration_object(card)) == card
    assert "scope" not in declaration_object(declaration)["spec"]  # a slot image's object as before
    https = parse_declaration(obj(source={"https": "https://files.example.com/nlb.bin"}))
    assert parse_declaration(declaration_object(https)) == https


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda o: o["metadata"].update(name="Bad"), "invalid bitstream name .Bad.", id="name"),
        pytest.param(lambda o: o.pop("spec"), "spec is missing", id="no-spec"),
        pytest.param(lambda o: o["spec"].update(sha256="x"), "spec.sha256", id="sha256"),
        pytest.param(lambda o: o["spec"].update(size=True), "spec.size", id="size-bool"),
        pytest.param(lambda o: o["spec"].update(size=-1), "spec.size", id="size-negative"),
        pytest.param(lambda o: o["spec"].update(platform=""), "spec.platform", id="platform"),
        pytest.param(lambda o: o["spec"].update(acceleratorId=None), "spec.acceleratorId", id="accelerator"),
        pytest.param(lambda o: o["spec"].update(prefetch="yes"), "spec.prefetch", id="prefetch"),
        pytest.param(
            lambda o: o["spec"].update(scope="region"), "spec.scope 'region' is not one of slot, card", id="scope"
        ),
        pytest.param(lambda o: o["spec"].update(source={}), "exactly one of oci and https", id="no-source"),
        pytest.param(
            lambda o: o["spec"]["source"].update(https="https://x.io/a"), "exactly one of oci and https", id="both"
        ),
        pytest.param(lambda o: o["spec"]["source"].update(oci="nlb:1"), "invalid OCI reference", id="oci"),
        pytest.param(lambda o: o["spec"].update(source={"https": "http://x.io/a"}), "spec.source.https", id="http"),
        pytest.param(lambda o: o["spec"]["source"].update(pullSecret="A"), "spec.source.pullSecret", id="secret"),
    ],
)
def test_bad_objects_are_refused_naming_the_field(change: Any, message: str) -> None:
    bad = copy.deepcopy(obj())
    change(bad)
    with pytest.raises(CatalogError, match=message):
        parse_declaration(bad)


def test_credentials_never_show_their_secrets() -> None:
    text = repr(Credentials(username="alice", password="s3cret", token="t0ken"))
    assert "alice" in text
    assert "s3cret" not in text
    assert "t0ken" not in text


@pytest.mark.parametrize(
    ("source", "host"),
    [
        pytest.param({"oci": "localhost:5000/fpga/nlb:1"}, "localhost:5000", id="registry"),
        pytest.param({"https": "https://files.example.com:8443/a/b.bin"}, "files.example.com:8443", id="url"),
        pytest.param({"https": "https://files.example.com"}, "files.example.com", id="url-without-path"),
    ],
)
def test_the_host_credentials_are_looked_up_for(source: dict[str, str], host: str) -> None:
    assert parse_declaration(obj(source=source)).host == host


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param(
            "https://user:s3cret@files.example.com/nlb.bin", "carries credentials .user:password@.", id="userinfo"
        ),
        pytest.param("https://s3cret@files.example.com/nlb.bin", "carries credentials", id="user-only"),
        pytest.param("https://files.example.com/nlb\x1b[31m.bin", "contains control characters", id="escape"),
        pytest.param("https://files.example.com/nlb\x00.bin", "contains control characters", id="nul"),
        pytest.param("https://files.example.com/nlb\x85.bin", "contains control characters", id="c1-control"),
        pytest.param("https://files.example.com/n\u00e4.bin", "printable ASCII", id="non-ascii"),
    ],
)
def test_a_url_with_credentials_or_control_characters_is_refused_without_showing_them(url: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message) as refused:
        parse_declaration(obj(source={"https": url}))
    assert "s3cret" not in str(refused.value)
    assert "\x1b" not in str(refused.value)
    assert "\x00" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("https://user:s3cret@h.io/a", "https://***@h.io/a", id="userinfo"),
        pytest.param("http://u:p#x@h.io/a@b", "http://***@h.io/a@b", id="odd-userinfo"),
        pytest.param("https://h.io/a@b", "https://h.io/a@b", id="at-in-path"),
    ],
)
def test_messages_show_a_url_without_its_userinfo(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_the_agent_checks_urls_with_the_crds_pattern() -> None:
    (document,) = load_documents(DAEMONSET_DIR / "fpgabitstream-crd.yaml")
    (version,) = document["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["source"]["properties"]["https"]["pattern"] == URL_PATTERN


ACCELERATOR_IDS = [
    "sim-accel",
    "--force",
    "-",
    "a",
    "a-",
    " a",
    "a ",
    "a b",
    "x" * 256,
    "\t",
    "~x",
    ",x",
    ".x",
    "-0" * 16,
]


def test_the_agent_checks_accelerator_ids_as_the_crds_pattern() -> None:
    """The CRD's acceleratorId pattern is the agent's, and both refuse the same ids (a leading '-' among them)."""
    (document,) = load_documents(DAEMONSET_DIR / "fpgabitstream-crd.yaml")
    (version,) = document["spec"]["versions"]
    field = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["acceleratorId"]
    assert field["pattern"] == ACCELERATOR_ID_PATTERN
    for accelerator_id in ACCELERATOR_IDS:
        crd_accepts = (
            re.search(field["pattern"], accelerator_id) is not None and len(accelerator_id) <= field["maxLength"]
        )
        try:
            parse_declaration(obj(acceleratorId=accelerator_id))
        except CatalogError:
            agent_accepts = False
        else:
            agent_accepts = True
        assert agent_accepts == crd_accepts, accelerator_id
    with pytest.raises(CatalogError, match=r"spec\.acceleratorId '--force' starts with '-'"):
        parse_declaration(obj(acceleratorId="--force"))

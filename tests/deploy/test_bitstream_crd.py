"""The FpgaBitstream CRD: a structural schema that refuses bad objects, checked here with jsonschema.

The API server evaluates the same OpenAPI v3 schema (plus the CEL rule, which the
end-to-end suite exercises). Unknown fields are refused here as ``kubectl apply``'s
strict field validation refuses them there.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from tests.deploy.manifests import DAEMONSET_DIR, Obj, load_documents

CRD_FILE = DAEMONSET_DIR / "fpgabitstream-crd.yaml"
SHA = "ab" * 32
PLATFORM = "0123456789abcdef0123456789abcdef"


def crd() -> Obj:
    (document,) = load_documents(CRD_FILE)
    return document


def version() -> Obj:
    (served,) = crd()["spec"]["versions"]
    return served


def as_json_schema(node: Any, strict: bool = True) -> Any:
    """The OpenAPI schema as JSON Schema: Kubernetes extensions dropped, unknown fields refused."""
    if isinstance(node, list):
        return [as_json_schema(item, strict) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {
        key: as_json_schema(value, key != "metadata") for key, value in node.items() if not key.startswith("x-")
    }
    if "properties" in node:
        converted["properties"] = {
            name: as_json_schema(value, name != "metadata") for name, value in node["properties"].items()
        }
        if strict:
            converted["additionalProperties"] = False
    return converted


VALIDATOR = jsonschema.Draft7Validator(as_json_schema(version()["schema"]["openAPIV3Schema"]))


def good() -> Obj:
    return {
        "apiVersion": "example.com/v1alpha1",
        "kind": "FpgaBitstream",
        "metadata": {"name": "nlb-mode0", "labels": {"team": "a"}},
        "spec": {
            "platform": PLATFORM,
            "acceleratorId": "d8424dc4-a4a3-c413-f89e-433683f9040b",
            "sha256": SHA,
            "size": 4096,
            "source": {"oci": "registry.example.com:5000/fpga/nlb-mode0:1.0", "pullSecret": "registry-creds"},
            "prefetch": True,
        },
    }


def errors(obj: Obj) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(obj)]


def changed(change: Any) -> Obj:
    obj = copy.deepcopy(good())
    change(obj)
    return obj


GOOD = [
    pytest.param(lambda o: None, id="full"),
    pytest.param(lambda o: o["spec"].pop("prefetch"), id="no-prefetch"),
    pytest.param(lambda o: o["spec"].update(scope="card"), id="whole-card-image"),
    pytest.param(lambda o: o["spec"]["source"].pop("pullSecret"), id="no-pull-secret"),
    pytest.param(lambda o: o["spec"].update(source={"https": "https://files.example.com/b/nlb.gbs"}), id="https"),
    pytest.param(
        lambda o: o["spec"].update(source={"https": "https://[::1]:8443/b/a@b/nlb.gbs?x=1&y=%20#frag"}),
        id="https-ipv6-query",
    ),
    pytest.param(lambda o: o["spec"]["source"].update(oci="localhost:5000/nlb@sha256:" + SHA), id="oci-digest"),
    pytest.param(
        lambda o: o["spec"]["source"].update(oci=f"127.0.0.1:41234/a/b-c/d_e:v1@sha256:{SHA}"), id="tag+digest"
    ),
    pytest.param(lambda o: o["spec"]["source"].update(oci="registry:5000/nlb:latest"), id="host-with-port"),
    pytest.param(lambda o: o["spec"].update(platform="xlnx,zynqmp-pcap-fpga"), id="platform-by-name"),
    pytest.param(lambda o: o["metadata"].update(name="a.b_c-1"), id="catalog-name"),
]

BAD = [
    pytest.param(lambda o: o["metadata"].update(name="Nlb"), "metadata/name", id="upper-case-name"),
    pytest.param(lambda o: o["metadata"].update(name="-nlb"), "metadata/name", id="name-starts-with-dash"),
    pytest.param(lambda o: o["metadata"].update(name="n" * 64), "metadata/name", id="name-too-long"),
    pytest.param(lambda o: o["spec"].update(sha256=SHA.upper()), "spec/sha256", id="sha256-upper-case"),
    pytest.param(lambda o: o["spec"].update(sha256=SHA[:-1]), "spec/sha256", id="sha256-short"),
    pytest.param(lambda o: o["spec"].update(size=0), "spec/size", id="size-zero"),
    pytest.param(lambda o: o["spec"].update(size="4096"), "spec/size", id="size-string"),
    pytest.param(lambda o: o["spec"].update(platform=""), "spec/platform", id="platform-empty"),
    pytest.param(lambda o: o["spec"].update(platform=" x"), "spec/platform", id="platform-leading-space"),
    pytest.param(lambda o: o["spec"].update(platform="a\nb"), "spec/platform", id="platform-newline"),
    pytest.param(lambda o: o["spec"].update(acceleratorId="x" * 257), "spec/acceleratorId", id="accelerator-long"),
    pytest.param(lambda o: o["spec"].update(acceleratorId="--force"), "spec/acceleratorId", id="accelerator-option"),
    pytest.param(lambda o: o["spec"].pop("sha256"), "spec", id="no-sha256"),
    pytest.param(lambda o: o["spec"].pop("platform"), "spec", id="no-platform"),
    pytest.param(lambda o: o["spec"].update(source={}), "spec/source", id="no-source"),
    pytest.param(
        lambda o: o["spec"]["source"].update(https="https://files.example.com/nlb.gbs"), "spec/source", id="two-sources"
    ),
    pytest.param(lambda o: o["spec"]["source"].update(oci="nlb:1.0"), "spec/source/oci", id="oci-no-registry"),
    pytest.param(lambda o: o["spec"]["source"].update(oci="docker.io/nlb"), "spec/source/oci", id="oci-no-tag"),
    pytest.param(lambda o: o["spec"]["source"].update(oci="r.io/Nlb:1"), "spec/source/oci", id="oci-upper-repo"),
    pytest.param(lambda o: o["spec"]["source"].update(oci="r.io/nlb@sha256:abc"), "spec/source/oci", id="oci-digest"),
    pytest.param(lambda o: o["spec"]["source"].update(oci="r:1:2/nlb:1"), "spec/source/oci", id="oci-two-ports"),
    pytest.param(
        lambda o: o["spec"].update(source={"https": "http://files.example.com/nlb.gbs"}),
        "spec/source/https",
        id="plain-http",
    ),
    pytest.param(
        lambda o: o["spec"].update(source={"https": "https://files example.com/x"}), "spec/source/https", id="url-space"
    ),
    pytest.param(
        lambda o: o["spec"].update(source={"https": "https://user:s3cret@files.example.com/x"}),
        "spec/source/https",
        id="url-userinfo",
    ),
    pytest.param(
        lambda o: o["spec"].update(source={"https": "https://files.example.com/x\x1b[2J"}),
        "spec/source/https",
        id="url-escape",
    ),
    pytest.param(
        lambda o: o["spec"].update(source={"https": "https://files.example.com/x\x00"}),
        "spec/source/https",
        id="url-nul",
    ),
    pytest.param(lambda o: o["spec"]["source"].update(pullSecret="Creds"), "spec/source/pullSecret", id="bad-secret"),
    pytest.param(lambda o: o["spec"].update(prefetch="yes"), "spec/prefetch", id="prefetch-string"),
    pytest.param(lambda o: o["spec"].update(scope="region"), "spec/scope", id="scope-unknown"),
    pytest.param(lambda o: o["spec"].update(sha="x"), "spec", id="unknown-field"),
    pytest.param(lambda o: o.pop("spec"), "", id="no-spec"),
]


@pytest.mark.parametrize("change", GOOD)
def test_good_objects_pass(change: Any) -> None:
    assert errors(changed(change)) == []


@pytest.mark.parametrize(("change", "where"), BAD)
def test_bad_objects_are_refused_naming_the_field(change: Any, where: str) -> None:
    found = errors(changed(change))
    assert found, "accepted"
    assert any(message.split(":")[0] == where for message in found), found


def test_it_is_cluster_scoped_in_our_group_and_served() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}" == "fpgabitstreams.example.com"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "FpgaBitstream"
    assert version()["name"] == "v1alpha1"
    assert version()["served"]
    assert version()["storage"]


def test_the_source_rule_says_exactly_one() -> None:
    source = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["source"]
    assert source["oneOf"] == [{"required": ["oci"]}, {"required": ["https"]}]
    (rule,) = source["x-kubernetes-validations"]
    assert rule["rule"] == "has(self.oci) != has(self.https)"
    assert "exactly one" in rule["message"]


def walk(node: Obj, path: str) -> list[tuple[str, Obj]]:
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += walk(child, f"{path}.{name}")
    return found


def test_the_schema_is_structural() -> None:
    """Every node has a type; oneOf branches only add requirements (the API server's structural rules)."""
    for path, node in walk(version()["schema"]["openAPIV3Schema"], ""):
        assert node.get("type") in {"object", "string", "integer", "boolean"}, path
        for branch in node.get("oneOf", []):
            assert set(branch) == {"required"}, path


def test_printer_columns_show_what_an_operator_checks() -> None:
    columns = {column["name"]: column["jsonPath"] for column in version()["additionalPrinterColumns"]}
    assert columns == {
        "Platform": ".spec.platform",
        "Accelerator": ".spec.acceleratorId",
        "Size": ".spec.size",
        "OCI": ".spec.source.oci",
        "URL": ".spec.source.https",
        "Prefetch": ".spec.prefetch",
        "SHA256": ".spec.sha256",
        "Age": ".metadata.creationTimestamp",
    }

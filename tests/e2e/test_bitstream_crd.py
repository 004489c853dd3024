"""The FpgaBitstream CRD on a real API server: installed, established, good objects admitted, bad ones
refused with the reason (schema patterns, exactly one source by the CEL rule). Objects are created with
server-side dry run, so nothing but the CRD (removed afterwards if this test installed it) stays."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.deploy.manifests import DAEMONSET_DIR
from tests.e2e.cluster import Cluster

GROUP, VERSION, PLURAL = "example.com", "v1alpha1", "fpgabitstreams"
ESTABLISH_POLLS = 300


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> Iterator[None]:
    body = yaml.safe_load((DAEMONSET_DIR / "fpgabitstream-crd.yaml").read_text())
    extensions = client.ApiextensionsV1Api(cluster.api)
    name = body["metadata"]["name"]
    created = False
    try:
        extensions.create_custom_resource_definition(body)
        created = True
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = extensions.read_custom_resource_definition(name)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        extensions.replace_custom_resource_definition(name, body)
    for _ in range(ESTABLISH_POLLS):
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"CRD {name} not Established")
    try:
        yield
    finally:
        if created:
            extensions.delete_custom_resource_definition(name)


def good() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "FpgaBitstream",
        "metadata": {"name": "e2e-nlb"},
        "spec": {
            "platform": "9a3d7c8e11114f0a8d1b0123456789ab",
            "acceleratorId": "sim-accel",
            "sha256": "ab" * 32,
            "size": 4096,
            "source": {"oci": "localhost:5000/fpga/nlb:1"},
        },
    }


def create(cluster: Cluster, obj: dict[str, Any]) -> None:
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(GROUP, VERSION, PLURAL, obj, dry_run="All")


@pytest.mark.usefixtures("crd")
def test_a_good_object_is_admitted(cluster: Cluster) -> None:
    create(cluster, good())
    https = copy.deepcopy(good())
    https["spec"]["source"] = {"https": "https://files.example.com/nlb.bin", "pullSecret": "creds"}
    create(cluster, https)


@pytest.mark.usefixtures("crd")
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(lambda o: o["spec"].update(sha256="AB" * 32), "spec.sha256", id="sha256"),
        pytest.param(lambda o: o["spec"].update(size=0), "spec.size", id="size"),
        pytest.param(lambda o: o["spec"]["source"].update(https="https://x.io/a"), "exactly one of oci and https",
                     id="two-sources"),
        # No source fails the oneOf, and the API server then skips the CEL rules ("some validation rules were
        # not checked because the object was invalid").
        pytest.param(lambda o: o["spec"].update(source={}), "one and only one schema (oneOf)", id="no-source"),
        pytest.param(lambda o: o["spec"]["source"].update(oci="nlb:1"), "spec.source.oci", id="oci"),
        pytest.param(lambda o: o["metadata"].update(name="nlb_1"), "metadata.name", id="name-not-dns"),
    ],
)  # fmt: skip
def test_bad_objects_are_refused_by_the_api_server(cluster: Cluster, change: Any, reason: str) -> None:
    obj = copy.deepcopy(good())
    change(obj)
    with pytest.raises(ApiException) as refused:
        create(cluster, obj)
    assert refused.value.status == 422
    assert reason in str(refused.value.body)

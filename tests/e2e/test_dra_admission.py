"""The admission policy of DRA mode's selector-less DeviceClass, on the real API server (v1.36).

DRA mode ships the DeviceClass ``fpga-slot-cached`` with no selector (one CEL evaluation per
device for cache-aware claims) and the ValidatingAdmissionPolicy that keeps it to our driver's
devices: a request or firstAvailable alternative of that class needs a CEL selector starting with
``device.driver == "fpga.example.com" && ``. This module applies those two manifest files as they
are shipped (``kubectl apply -f``), and checks that the API server refuses claims and templates
without the check, with the policy's message naming the rule and the requests, and accepts the
shipped cache-aware template (daemonset/examples/dra/cached-first.yaml). No agent is deployed.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import SLOT_CAPACITY
from tests.e2e.cluster import REPO, Cluster, wait_for
from tests.e2e.deployment import kubectl

COMPONENT = REPO / "daemonset" / "dra-mode"
MANIFESTS = (COMPONENT / "deviceclass-cached.yaml", COMPONENT / "cached-class-policy.yaml")
EXAMPLE = REPO / "daemonset" / "examples" / "dra" / "cached-first.yaml"
CACHED_CLASS = "fpga-slot-cached"
GUARD = f'device.driver == "{DRIVER_NAME}" && '
RULE = f"every request using it needs a CEL selector that starts with '{GUARD}', or a capacity request"
BITSTREAM_CLAUSE = f'device.attributes["{DRIVER_NAME}"].bitstream == "aes-v1"'


def choice(name: str, device_class: str, *expressions: str) -> dict[str, Any]:
    """A firstAvailable alternative (or, without the name, an ``exactly``) of ``device_class`` with these selectors."""
    body: dict[str, Any] = {"name": name, "deviceClassName": device_class}
    if expressions:
        body["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    return body


def claim_spec(*requests: dict[str, Any], bitstream: str | None = None) -> dict[str, Any]:
    """A claim's spec; with ``bitstream``, one opaque configuration of our driver naming it for every request."""
    spec: dict[str, Any] = {"devices": {"requests": list(requests)}}
    if bitstream is not None:
        opaque = {"driver": DRIVER_NAME, "parameters": {"bitstream": bitstream}}
        spec["devices"]["config"] = [{"opaque": opaque}]
    return spec


def by_capacity(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``body`` (an alternative, or an ``exactly`` request) asking for these capacities."""
    target = body.get("exactly", body)
    target["capacity"] = {"requests": dict.fromkeys(keys, "1")}
    return body


def exactly(name: str, device_class: str, *expressions: str) -> dict[str, Any]:
    body = choice(name, device_class, *expressions)
    del body["name"]
    return {"name": name, "exactly": body}


def first_available(name: str, *choices: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(choices)}


@pytest.fixture(scope="module")
def resource(cluster: Cluster) -> Any:
    return client.ResourceV1Api(cluster.api)


@pytest.fixture(scope="module")
def namespace(cluster: Cluster, resource: Any) -> Iterator[str]:
    """A namespace, with the shipped class and policy applied; all removed afterwards. The claim ``before``, made
    before the policy, names the class without the check."""
    name = f"fpga-slot-e2e-admission-{secrets.token_hex(3)}"
    cluster.core.create_namespace({"metadata": {"name": name}})
    files = [arg for path in MANIFESTS for arg in ("-f", str(path))]
    try:
        create_claim(
            resource, name, {"metadata": {"name": "before"}, "spec": claim_spec(exactly("fpga", CACHED_CLASS))}
        )
        kubectl("apply", *files)
        # The API server compiles a new policy in the background: wait until it refuses a claim without the check.
        probe = {"metadata": {"name": "probe"}, "spec": claim_spec(exactly("fpga", CACHED_CLASS))}
        wait_for("the policy in force", lambda: refusal(lambda: create_claim(resource, name, probe, dry_run=True)))
        yield name
    finally:
        kubectl("delete", "--ignore-not-found", *files)
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespace(name)


def create_claim(resource: Any, namespace: str, body: dict[str, Any], *, dry_run: bool = False) -> None:
    resource.create_namespaced_resource_claim(namespace, body, **({"dry_run": "All"} if dry_run else {}))


def refusal(create: Any) -> str | None:
    """The API server's message when ``create()`` is refused (422), None when it is accepted."""
    try:
        create()
    except ApiException as exc:
        if exc.status != 422:
            raise
        message: str = json.loads(exc.body)["message"]
        return message
    return None


REFUSED = [
    pytest.param(claim_spec(exactly("fpga", CACHED_CLASS)), ["fpga"], id="exactly-without-selectors"),
    pytest.param(claim_spec(exactly("fpga", CACHED_CLASS, BITSTREAM_CLAUSE)), ["fpga"], id="exactly-no-driver-check"),
    pytest.param(
        claim_spec(exactly("fpga", CACHED_CLASS, BITSTREAM_CLAUSE, f"{BITSTREAM_CLAUSE} && {GUARD}true")),
        ["fpga"],
        id="driver-check-not-first",
    ),
    pytest.param(
        claim_spec(
            first_available(
                "fpga",
                choice("cached", CACHED_CLASS, BITSTREAM_CLAUSE),
                choice("any", CACHED_CLASS, f'{GUARD}device.attributes["{DRIVER_NAME}"].platform == "sim-pr-v1"'),
            ),
            exactly("second", CACHED_CLASS),
        ),
        ["fpga/cached", "second"],
        id="one-alternative-and-a-request-without-it",
    ),
    pytest.param(
        claim_spec(by_capacity(exactly("fpga", CACHED_CLASS), "other.example.com/slot")),
        ["fpga"],
        id="a-capacity-of-another-driver",
    ),
]


@pytest.mark.parametrize(("spec", "named"), REFUSED)
def test_a_claim_of_the_cached_class_without_the_driver_check_is_refused_naming_the_rule(
    resource: Any, namespace: str, spec: dict[str, Any], named: list[str]
) -> None:
    body = {"metadata": {"name": "unguarded"}, "spec": spec}
    message = refusal(lambda: create_claim(resource, namespace, body))
    assert message is not None, "created"
    assert "fpga-slot-cached-checks-driver" in message
    assert RULE in message, message
    assert f"missing in {', '.join(named)}" in message, message
    with pytest.raises(ApiException) as gone:
        resource.read_namespaced_resource_claim("unguarded", namespace)
    assert gone.value.status == 404


def test_a_bitstream_capacity_that_is_not_the_configured_bitstreams_is_refused_naming_the_expected_key(
    resource: Any, namespace: str
) -> None:
    """``cached`` asking for ``bs_aes_v1`` (not escaped) while the configuration names ``aes-v1``: it could
    never find the slot holding it. The message names the alternative and the key expected."""
    spec = claim_spec(
        first_available(
            "fpga",
            by_capacity(choice("cached", CACHED_CLASS), f"{DRIVER_NAME}/bs_aes_v1"),
            by_capacity(choice("any", CACHED_CLASS), f"{DRIVER_NAME}/slot"),
        ),
        bitstream="aes-v1",
    )
    message = refusal(lambda: create_claim(resource, namespace, {"metadata": {"name": "mismatched"}, "spec": spec}))
    assert message is not None, "created"
    assert "not so in fpga/cached (configured: fpga.example.com/bs_aes_dv1)" in message, message
    right = claim_spec(
        first_available("fpga", by_capacity(choice("cached", CACHED_CLASS), f"{DRIVER_NAME}/bs_aes_dv1")),
        bitstream="aes-v1",
    )
    create_claim(resource, namespace, {"metadata": {"name": "matched"}, "spec": right})


def test_a_template_of_the_cached_class_without_the_driver_check_is_refused(resource: Any, namespace: str) -> None:
    template = {
        "metadata": {"name": "unguarded"},
        "spec": {"spec": claim_spec(first_available("fpga", choice("cached", CACHED_CLASS, BITSTREAM_CLAUSE)))},
    }
    message = refusal(lambda: resource.create_namespaced_resource_claim_template(namespace, template))
    assert message is not None, "created"
    assert "missing in fpga/cached" in message, message


def test_the_shipped_cache_aware_template_and_claims_of_other_classes_are_accepted(
    resource: Any, namespace: str
) -> None:
    (template,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "ResourceClaimTemplate"]
    created = resource.create_namespaced_resource_claim_template(namespace, template)
    (request,) = created.spec.spec.devices.requests
    assert {c.device_class_name for c in request.first_available} == {CACHED_CLASS}
    # The guarded form as a claim, and the class with a selector of its own (the policy leaves it alone).
    guarded = {"metadata": {"name": "guarded"}, "spec": claim_spec(exactly("fpga", CACHED_CLASS, GUARD + "true"))}
    create_claim(resource, namespace, guarded)
    slot = {"metadata": {"name": "slot"}, "spec": claim_spec(by_capacity(exactly("fpga", CACHED_CLASS), SLOT_CAPACITY))}
    create_claim(resource, namespace, slot)
    plain = {"metadata": {"name": "plain"}, "spec": claim_spec(exactly("fpga", "fpga-slot"))}
    create_claim(resource, namespace, plain)


def test_a_claim_made_before_the_policy_can_still_be_labelled_and_deleted(resource: Any, namespace: str) -> None:
    """An update that leaves the spec alone (labels, finalizers) is not checked: old claims stay manageable."""
    patched = resource.patch_namespaced_resource_claim("before", namespace, {"metadata": {"labels": {"seen": "yes"}}})
    assert patched.metadata.labels == {"seen": "yes"}
    resource.delete_namespaced_resource_claim("before", namespace)

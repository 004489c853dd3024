"""ResourceClaims read through the real kubernetes client from the fake API server, as NodePrepareResources reads
them: the allocation of a cache-aware claim, a claim updated in place, and one deleted and made again."""

from __future__ import annotations

import pytest
from kubernetes import client

from agent.dra.constants import DRIVER_NAME
from agent.errors import KubeError
from agent.kube.claims import AllocatedDevice, ClaimReader
from tests.fakeapi import DEFAULT_NODE, ApiError, FakeKubeApiServer, make_resource_claim

NS = "team"
CACHED_FIRST = {"fpga": ["cached", "any"]}


def claim(device: str, subrequest: str = "any") -> dict[str, object]:
    return make_resource_claim(
        "fpga",
        namespace=NS,
        driver=DRIVER_NAME,
        devices=[(f"fpga/{subrequest}", DEFAULT_NODE, device)],
        parameters={"bitstream": "aes"},
        first_available=CACHED_FIRST,
        reserved_for=[("train", "pod-uid")],
    )


def test_a_claim_allocated_through_an_alternative_names_the_subrequest_and_takes_the_requests_config(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    stored = apiserver.put_resource_claim(claim("simcard0-slot1"))
    assert [r["name"] for r in stored["spec"]["devices"]["requests"][0]["firstAvailable"]] == ["cached", "any"]
    info = ClaimReader(api_client, DRIVER_NAME).read(NS, "fpga", stored["metadata"]["uid"])
    (device,) = info.devices
    assert device == AllocatedDevice("fpga/any", DEFAULT_NODE, "simcard0-slot1")
    assert device.parent == "fpga"
    assert info.parameters_for(device) == {"bitstream": "aes"}
    assert info.reserved_for == (("train", "pod-uid"),)


def test_a_claim_updated_in_place_keeps_its_uid_and_one_made_again_is_another(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    reader = ClaimReader(api_client, DRIVER_NAME)
    first = apiserver.put_resource_claim(claim("simcard0-slot1"))
    uid = first["metadata"]["uid"]
    updated = apiserver.put_resource_claim(claim("simcard0-slot2", "cached"))  # the scheduler's status update
    assert updated["metadata"]["uid"] == uid
    assert updated["metadata"]["creationTimestamp"] == first["metadata"]["creationTimestamp"]
    assert int(updated["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    (device,) = reader.read(NS, "fpga", uid).devices
    assert device == AllocatedDevice("fpga/cached", DEFAULT_NODE, "simcard0-slot2")

    apiserver.delete_resource_claim(NS, "fpga")
    again = apiserver.put_resource_claim(claim("simcard0-slot1"))
    assert again["metadata"]["uid"] != uid
    with pytest.raises(KubeError, match="was replaced"):
        reader.read(NS, "fpga", uid)


def test_an_update_naming_another_uid_is_refused(apiserver: FakeKubeApiServer) -> None:
    apiserver.put_resource_claim(claim("simcard0-slot1"))
    body = claim("simcard0-slot2")
    body["metadata"]["uid"] = "another"  # type: ignore[index]
    with pytest.raises(ApiError, match="Precondition failed"):
        apiserver.put_resource_claim(body)


def test_a_result_naming_a_subrequest_the_spec_lacks_is_a_mistake_of_the_test() -> None:
    with pytest.raises(ValueError, match="subrequests"):
        make_resource_claim("fpga", driver=DRIVER_NAME, devices=[("fpga/any", DEFAULT_NODE, "s")])
    with pytest.raises(ValueError, match="subrequests"):
        make_resource_claim("fpga", driver=DRIVER_NAME, devices=[("fpga", "n", "s")], first_available=CACHED_FIRST)

"""A ResourceClaim as the DRA driver reads it: its own devices and configs only, clear errors otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import KubeError
from agent.kube.claims import AllocatedDevice, parse_claim

DRIVER = "fpga.example.com"


def claim(**status: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": "fpga", "uid": "u-1"}, "status": status}


def allocation(results: list[dict[str, Any]], config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"devices": {"results": results, "config": config or []}}


def result(request: str, device: str, driver: str = DRIVER) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": "node-a", "device": device}


def opaque(parameters: dict[str, Any], source: str, requests: list[str] | None = None, driver: str = DRIVER) -> Any:
    config: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests is not None:
        config["requests"] = requests
    return config


def test_only_this_drivers_devices_and_the_pods_are_kept() -> None:
    info = parse_claim(
        claim(
            allocation=allocation([result("fpga", "slot-0"), result("gpu", "gpu-0", driver="gpu.example.com")]),
            reservedFor=[
                {"resource": "pods", "name": "train", "uid": "p-1"},
                {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "j-1"},
            ],
        ),
        DRIVER,
    )
    assert (info.namespace, info.name, info.uid) == ("team", "fpga", "u-1")
    assert info.devices == (AllocatedDevice("fpga", "node-a", "slot-0"),)
    assert info.reserved_for == (("train", "p-1"),)


def test_a_claims_config_wins_over_its_class_and_a_later_one_over_an_earlier() -> None:
    info = parse_claim(
        claim(
            allocation=allocation(
                [result("fpga/cached", "slot-0"), result("other", "slot-1")],
                [
                    opaque({"bitstream": "from-claim", "x": 1}, "FromClaim", ["fpga"]),
                    opaque({"bitstream": "from-class", "y": 2}, "FromClass"),
                    opaque({"bitstream": "later"}, "FromClaim", ["fpga/cached"]),
                    opaque({"bitstream": "not ours"}, "FromClaim", driver="gpu.example.com"),
                ],
            )
        ),
        DRIVER,
    )
    first, second = info.devices
    assert first.parent == "fpga"
    assert info.parameters_for(first) == {"bitstream": "later", "x": 1, "y": 2}
    assert info.parameters_for(second) == {"bitstream": "from-class", "y": 2}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (claim(), "is not allocated"),
        (claim(allocation={"devices": {"results": "nope"}}), "results is not a list"),
        (claim(allocation=allocation([{"driver": DRIVER, "pool": "p"}])), "lacks request, pool or device"),
        (claim(allocation=allocation([], [opaque({}, "Elsewhere")])), "not FromClass or FromClaim"),
        (claim(allocation=allocation([], [opaque("text", "FromClaim")])), "parameters is not an object"),  # type: ignore[arg-type]
    ],
)
def test_a_claim_that_is_not_usable_says_why(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(KubeError, match=message):
        parse_claim(raw, DRIVER)

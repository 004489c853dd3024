"""The ResourceSlice body: one pool per node, devices with typed attributes, the API's limits checked first."""

from __future__ import annotations

import pytest

from agent.errors import KubeError
from agent.kube.resourceslices import MAX_DEVICES, SliceDevice, slice_spec


def test_a_nodes_slots_become_one_complete_pool_with_typed_attributes() -> None:
    spec = slice_spec(
        "fpga.example.com",
        "node-a",
        [SliceDevice("card0-port0", {"platform": "pac_a10", "numa": 1, "healthy": True, "bitstream": ""})],
    )
    assert spec["driver"] == "fpga.example.com"
    assert spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    (device,) = spec["devices"]
    assert device == {
        "name": "card0-port0",
        "attributes": {
            "bitstream": {"string": ""},
            "healthy": {"bool": True},
            "numa": {"int": 1},
            "platform": {"string": "pac_a10"},
        },
    }


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (SliceDevice("Card0", {}), "is not a DNS label"),
        (SliceDevice("x" * 64, {}), "is not a DNS label"),
        (SliceDevice("slot", {"has-dash": "v"}), "is not a C identifier"),
        (SliceDevice("slot", {"a" * 33: "v"}), "is not a C identifier"),
        (SliceDevice("slot", {"bitstream": "b" * 65}), "65 characters, more than 64"),
        (SliceDevice("slot", {f"a{i}": i for i in range(33)}), "more than 32 attributes"),
        (SliceDevice("slot", {f"a{i}": i for i in range(31)}, capacity={"d.io/x": 1, "d.io/y": 1}), "and capacities"),
        (SliceDevice("slot", {}, capacity={"slot": 1}), "capacity name 'slot' is not"),
        (SliceDevice("slot", {}, capacity={"d.io/" + "c" * 33: 1}), "is not <domain>/<C identifier"),
        (SliceDevice("slot", {}, capacity={"d.io/has-dash": 1}), "is not <domain>/<C identifier"),
        (SliceDevice("slot", {}, capacity={"d.io/x": -1}), "capacity d.io/x is negative"),
    ],
)
def test_what_the_api_would_refuse_is_a_clear_error_naming_the_device(device: SliceDevice, message: str) -> None:
    with pytest.raises(KubeError, match=message):
        slice_spec("fpga.example.com", "node-a", [device])


def test_capacities_are_rendered_as_quantities() -> None:
    device = SliceDevice("slot", {}, capacity={"fpga.example.com/slot": 1, "fpga.example.com/bs_aes_dv1": 1})
    (rendered,) = slice_spec("fpga.example.com", "node-a", [device])["devices"]
    assert rendered["capacity"] == {
        "fpga.example.com/bs_aes_dv1": {"value": "1"},
        "fpga.example.com/slot": {"value": "1"},
    }
    assert "capacity" not in slice_spec("fpga.example.com", "node-a", [SliceDevice("s", {})])["devices"][0]


def test_more_devices_than_one_slice_holds_are_refused() -> None:
    with pytest.raises(KubeError, match="do not fit one ResourceSlice"):
        slice_spec("fpga.example.com", "node-a", [SliceDevice(f"s{i}", {}) for i in range(MAX_DEVICES + 1)])

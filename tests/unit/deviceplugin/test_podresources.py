"""containers_from_pods on what a real kubelet's pod-resources List returned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from agent._proto.podresources.v1 import api_pb2 as pr
from agent.deviceplugin.constants import RESOURCE_NAME
from agent.deviceplugin.podresources import ContainerRef, containers_from_pods

#: What a real kubelet v1.36 answered to List, rendered as JSON (proto3 JSON names).
WIRE_SAMPLE = Path(__file__).parents[2] / "wire-samples" / "podresources-list.json"


@pytest.fixture(scope="module")
def listed() -> pr.ListPodResourcesResponse:
    sample = json.loads(WIRE_SAMPLE.read_text())
    return json_format.ParseDict(sample["List"], pr.ListPodResourcesResponse())


def test_the_sample_lists_one_entry_per_device(listed: pr.ListPodResourcesResponse) -> None:
    # the shape that makes merging necessary, as the kubelet sent it
    (pod,) = [p for p in listed.pod_resources if p.name == "fpga-pod-3slots"]
    assert [list(d.device_ids) for d in pod.containers[0].devices] == [
        ["fpga-slot-1"],
        ["fpga-slot-2"],
        ["fpga-slot-3"],
    ]


def test_entries_of_one_container_are_merged(listed: pr.ListPodResourcesResponse) -> None:
    refs = containers_from_pods(listed.pod_resources, RESOURCE_NAME)
    assert refs == [
        ContainerRef("default", "fpga-pod-overflow", "main", frozenset({"fpga-slot-0"})),
        ContainerRef("default", "fpga-pod-3slots", "main", frozenset({"fpga-slot-1", "fpga-slot-2", "fpga-slot-3"})),
    ]


def test_other_resources_are_ignored(listed: pr.ListPodResourcesResponse) -> None:
    refs = containers_from_pods(listed.pod_resources, RESOURCE_NAME)
    assert "sample-res-pod" not in {ref.pod for ref in refs}
    assert all(not device_id.startswith("Dev-") for ref in refs for device_id in ref.device_ids)

    (other,) = containers_from_pods(listed.pod_resources, "example.com/resource")
    assert other == ContainerRef("default", "sample-res-pod", "main", frozenset({"Dev-1"}))


def test_unknown_resource_gives_nothing(listed: pr.ListPodResourcesResponse) -> None:
    assert containers_from_pods(listed.pod_resources, "example.com/gpu") == []


def _pod(namespace: str, name: str, containers: dict[str, list[tuple[str, list[str]]]]) -> pr.PodResources:
    return pr.PodResources(
        namespace=namespace,
        name=name,
        containers=[
            pr.ContainerResources(
                name=container,
                devices=[pr.ContainerDevices(resource_name=res, device_ids=ids) for res, ids in entries],
            )
            for container, entries in containers.items()
        ],
    )


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], [], id="no-pods"),
        pytest.param([_pod("ns", "p", {"c": []})], [], id="container-without-devices"),
        pytest.param(
            [
                _pod(
                    "ns",
                    "p",
                    {
                        "c": [
                            (RESOURCE_NAME, ["a", "b"]),
                            ("example.com/other", ["x"]),
                            (RESOURCE_NAME, ["c"]),
                        ]
                    },
                )
            ],
            [ContainerRef("ns", "p", "c", frozenset({"a", "b", "c"}))],
            id="mixed-resources-in-one-container",
        ),
        pytest.param(
            [_pod("ns", "p", {"c": [(RESOURCE_NAME, ["a"]), (RESOURCE_NAME, ["a"])]})],
            [ContainerRef("ns", "p", "c", frozenset({"a"}))],
            id="repeated-id-once",
        ),
        pytest.param(
            [_pod("ns", "p", {"init": [(RESOURCE_NAME, ["a"])], "main": [(RESOURCE_NAME, ["b"])]})],
            [
                ContainerRef("ns", "p", "init", frozenset({"a"})),
                ContainerRef("ns", "p", "main", frozenset({"b"})),
            ],
            id="containers-stay-apart",
        ),
        pytest.param(
            [
                _pod("ns1", "p", {"c": [(RESOURCE_NAME, ["a"])]}),
                _pod("ns2", "p", {"c": [(RESOURCE_NAME, ["b"])]}),
            ],
            [
                ContainerRef("ns1", "p", "c", frozenset({"a"})),
                ContainerRef("ns2", "p", "c", frozenset({"b"})),
            ],
            id="same-pod-name-other-namespace",
        ),
    ],
)
def test_containers_from_pods(pods: list[pr.PodResources], expected: list[ContainerRef]) -> None:
    assert containers_from_pods(pods, RESOURCE_NAME) == expected

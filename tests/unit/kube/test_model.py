"""Pod parsing: what the agent keeps of a pod as the API server sends it, and nothing breaks on gaps."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from agent.kube.pods import ContainerSlots, PodInfo, parse_pod, parse_timestamp
from agent.slots.bitstreamrequest import SLOT_RESOURCE

SAMPLE = Path(__file__).parents[2] / "wire-samples" / "pod-fpga.json"


@pytest.fixture
def sample() -> dict[str, Any]:
    """A pod as `kubectl get pod -o json` shows it: managed fields, owner, volumes, status."""
    return json.loads(SAMPLE.read_text())


def test_parse_pod_keeps_what_the_agent_needs(sample: dict[str, Any]) -> None:
    pod = parse_pod(sample)

    assert pod.namespace == "ml"
    assert pod.name == "fpga-inference-7c9d5b6f8-x2l4q"
    assert pod.uid == "9b2c6a51-1d43-4b0a-8e4f-5d7d4e1f2a10"
    assert pod.node_name == "worker-3"
    assert pod.phase == "Pending"
    assert pod.created == datetime.datetime(2025, 3, 14, 9, 26, 53, tzinfo=datetime.UTC).timestamp()
    assert pod.annotations["example.com/fpga-bitstream"] == "aes-gcm-v2"
    assert pod.annotations["example.com/fpga-bitstream.sidecar"] == "crc32"
    assert pod.containers == (ContainerSlots("main", 2), ContainerSlots("sidecar", 1), ContainerSlots("metrics", 0))
    assert pod.init_containers == (ContainerSlots("selftest", 1),)
    assert pod.deleted is False
    assert pod.key == ("ml", "fpga-inference-7c9d5b6f8-x2l4q")
    assert str(pod) == "ml/fpga-inference-7c9d5b6f8-x2l4q"


def test_parse_pod_containers_read_as_plain_pairs(sample: dict[str, Any]) -> None:
    """Callers may treat containers as (name, slots) tuples."""
    pod = parse_pod(sample)
    assert [tuple(c) for c in pod.containers] == [("main", 2), ("sidecar", 1), ("metrics", 0)]
    assert dict(pod.containers) == {"main": 2, "sidecar": 1, "metrics": 0}


def test_parse_pod_can_mark_the_last_state_of_a_removed_pod(sample: dict[str, Any]) -> None:
    assert parse_pod(sample, deleted=True).deleted is True
    assert parse_pod(sample).as_deleted() == parse_pod(sample, deleted=True)


def test_pod_info_is_a_frozen_value(sample: dict[str, Any]) -> None:
    pod = parse_pod(sample)
    with pytest.raises(AttributeError):
        pod.phase = "Running"  # type: ignore[misc]
    with pytest.raises(TypeError):
        pod.annotations["example.com/fpga-bitstream"] = "other"  # type: ignore[index]
    assert pod == parse_pod(copy.deepcopy(sample))
    assert hash(pod) == hash(parse_pod(copy.deepcopy(sample)))


def test_pod_info_differs_only_in_what_it_keeps(sample: dict[str, Any]) -> None:
    """A status update that touches nothing the agent keeps gives an equal value (no MODIFIED)."""
    updated = copy.deepcopy(sample)
    updated["metadata"]["resourceVersion"] = "48211999"
    updated["status"]["conditions"].append({"type": "Initialized", "status": "True"})
    assert parse_pod(updated) == parse_pod(sample)
    updated["metadata"]["annotations"]["example.com/fpga-bitstream"] = "sha3"
    assert parse_pod(updated) != parse_pod(sample)


def _with_resources(resources: dict[str, Any] | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if resources is not None:
        container["resources"] = resources
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("resources", "slots"),
    [
        pytest.param({"limits": {SLOT_RESOURCE: "2"}, "requests": {SLOT_RESOURCE: "2"}}, 2, id="limits-and-requests"),
        pytest.param({"limits": {SLOT_RESOURCE: "3"}}, 3, id="limits-only"),
        pytest.param({"requests": {SLOT_RESOURCE: "1"}}, 1, id="requests-only"),
        pytest.param({"limits": {SLOT_RESOURCE: 4}}, 4, id="integer-json"),
        pytest.param({"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}, 0, id="other-resources"),
        pytest.param({}, 0, id="empty-resources"),
        pytest.param(None, 0, id="no-resources"),
        pytest.param({"limits": None, "requests": None}, 0, id="null-maps"),
        pytest.param({"limits": {SLOT_RESOURCE: "lots"}}, 0, id="unparsable-quantity"),
        pytest.param({"limits": {SLOT_RESOURCE: "500m"}}, 0, id="fractional-quantity"),
    ],
)
def test_parse_pod_reads_slot_requests_per_container(resources: dict[str, Any] | None, slots: int) -> None:
    assert parse_pod(_with_resources(resources)).containers == (ContainerSlots("c", slots),)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {"metadata": {"name": "bare"}},
            PodInfo(namespace="", name="bare", uid="", node_name="", phase="Pending", created=0.0),
            id="only-a-name",
        ),
        pytest.param(
            {"metadata": {"name": "p", "namespace": "ns", "annotations": None}, "spec": None, "status": None},
            PodInfo(namespace="ns", name="p", uid="", node_name="", phase="Pending", created=0.0),
            id="nulls",
        ),
        pytest.param(
            {"metadata": {"name": "p", "creationTimestamp": "yesterday"}, "spec": {"containers": "garbage"}},
            PodInfo(namespace="", name="p", uid="", node_name="", phase="Pending", created=0.0),
            id="malformed-fields",
        ),
        pytest.param(
            {"metadata": {"name": "p", "annotations": {"a": "1", "b": 2}}, "status": {"phase": "Running"}},
            PodInfo(namespace="", name="p", uid="", node_name="", phase="Running", created=0.0, annotations={"a": "1"}),
            id="non-string-annotation-dropped",
        ),
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, "junk", {"resources": {}}]}},
            PodInfo(
                namespace="",
                name="p",
                uid="",
                node_name="",
                phase="Pending",
                created=0.0,
                containers=(ContainerSlots("a", 0), ContainerSlots("", 0)),
            ),
            id="odd-containers",
        ),
    ],
)
def test_parse_pod_fills_missing_fields_with_neutral_values(obj: dict[str, Any], expected: PodInfo) -> None:
    assert parse_pod(obj) == expected


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({}, id="empty"),
        pytest.param({"metadata": {"namespace": "ns"}}, id="no-name"),
        pytest.param({"metadata": {"name": ""}}, id="empty-name"),
        pytest.param({"metadata": "pod"}, id="metadata-not-a-map"),
    ],
)
def test_parse_pod_rejects_objects_without_a_name(obj: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        parse_pod(obj)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("1970-01-01T00:01:40Z", 100.0, id="utc-z"),
        pytest.param("1970-01-01T01:01:40+01:00", 100.0, id="offset"),
        pytest.param("1970-01-01T00:01:40", 100.0, id="naive-is-utc"),
        pytest.param("", 0.0, id="empty"),
        pytest.param(None, 0.0, id="unset"),
        pytest.param("soon", 0.0, id="bad"),
        pytest.param(12, 0.0, id="not-a-string"),
    ],
)
def test_parse_timestamp(raw: object, expected: float) -> None:
    assert parse_timestamp(raw) == expected

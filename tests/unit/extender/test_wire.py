"""Reading ExtenderArgs: only the pod's annotations and slot requests, clear errors for anything else."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.errors import ExtenderRequestError
from agent.extender.demand import ContainerDemand
from agent.extender.scoring import FilterOutcome
from agent.extender.wire import encode_priorities, filter_result, parse_extender_args, read_pod_demand

SAMPLES = Path(__file__).parents[2] / "wire-samples"


def sample(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SAMPLES / name).read_text())
    return data


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": list(containers), "initContainers": list(init)},
    }


def container(name: str, limit: object = None, request: object = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    if limit is not None:
        resources["limits"]["example.com/fpga-slot"] = limit
    if request is not None:
        resources["requests"]["example.com/fpga-slot"] = request
    return {"name": name, "image": "x", "resources": resources}


def body(value: object) -> bytes:
    return json.dumps(value).encode()


def test_the_captured_request_reads_as_names_and_a_one_slot_pod() -> None:
    request = parse_extender_args(body(sample("extender-prioritize-request.json")))
    assert request.node_names == ["fake-fpga-1", "fake-fpga-2"]
    assert request.nodes is None
    assert request.demand.pod == "default/fpga-pod-2"
    assert request.demand.containers == (ContainerDemand("main", 1, None),)
    assert not request.demand.by_bitstream
    assert request.demand.unnamed == 1


def test_full_node_objects_are_kept_as_they_came() -> None:
    args = sample("extender-filter-request.json")
    nodes = [{"metadata": {"name": "a", "resourceVersion": "5"}, "status": {"big": "x" * 100}}]
    args["NodeNames"] = None
    args["Nodes"] = {"metadata": {}, "items": nodes}
    request = parse_extender_args(body(args))
    assert request.node_names is None
    assert request.names == ["a"]
    assert request.nodes == nodes


def test_an_empty_node_list_may_be_null_items() -> None:
    args = sample("extender-filter-request.json")
    args["NodeNames"] = None
    args["Nodes"] = {"metadata": {}, "items": None}
    assert parse_extender_args(body(args)).names == []


def test_field_names_match_as_gos_decoder_does() -> None:
    args = sample("extender-filter-request.json")
    lowered = {"pod": args["Pod"], "nodenames": ["x"]}
    assert parse_extender_args(body(lowered)).node_names == ["x"]


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, {"main": None, "side": None}, id="none"),
        pytest.param({"example.com/fpga-bitstream": "aes"}, {"main": "aes", "side": "aes"}, id="pod-wide"),
        pytest.param(
            {"example.com/fpga-bitstream": "aes", "example.com/fpga-bitstream.side": "crc"},
            {"main": "aes", "side": "crc"},
            id="per-container-override",
        ),
        pytest.param({"example.com/fpga-bitstream.side": "crc"}, {"main": None, "side": "crc"}, id="only-override"),
        pytest.param({"example.com/fpga-bitstream": ""}, {"main": None, "side": None}, id="empty-is-none"),
    ],
)
def test_bitstream_per_container(annotations: dict[str, str], expected: dict[str, str | None]) -> None:
    demand = read_pod_demand(pod(container("main", "2"), container("side", "1"), container("log"), **annotations))
    assert {c.name: c.bitstream for c in demand.containers} == expected  # "log" asks for no slot


def test_requests_per_container_limits_first_then_requests_init_marked() -> None:
    demand = read_pod_demand(
        pod(
            container("a", limit="2", request="2"),
            container("b", request=1),
            init=(container("i", limit="3"),),
            **{"example.com/fpga-bitstream": "aes"},
        )
    )
    assert demand.containers == (
        ContainerDemand("i", 3, "aes", True),
        ContainerDemand("a", 2, "aes"),
        ContainerDemand("b", 1, "aes"),
    )
    assert dict(demand.by_bitstream) == {"aes": 3}


def _set(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    """The captured request with one field replaced (by its path of keys and indexes)."""
    args = copy.deepcopy(sample("extender-filter-request.json"))
    target: Any = args
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return args


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(b"", "the body is not JSON", id="empty"),
        pytest.param(b"{", "the body is not JSON", id="truncated"),
        pytest.param(b"\xff\xfe", "the body is not JSON", id="not-utf8"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "the body is nested too deeply", id="deep"),
        pytest.param(b"[]", r"must be a JSON object \(ExtenderArgs\), got a list", id="list"),
        pytest.param(b'"x"', r"must be a JSON object \(ExtenderArgs\), got a string", id="string"),
        pytest.param(b"{}", "Pod must be an object, got null", id="no-pod"),
        pytest.param(body({"Pod": 3, "NodeNames": []}), "Pod must be an object, got a number", id="pod-number"),
        pytest.param(body(_set(("NodeNames",), None)), "neither NodeNames nor Nodes is given", id="no-candidates"),
        pytest.param(body(_set(("NodeNames",), "a")), "NodeNames must be a list of strings", id="names-string"),
        pytest.param(body(_set(("NodeNames",), [1])), "NodeNames must be a list of strings", id="names-numbers"),
        pytest.param(
            body({**_set(("NodeNames",), None), "Nodes": []}),
            "Nodes must be a NodeList object, got a list",
            id="nodes-list",
        ),
        pytest.param(
            body({**_set(("NodeNames",), None), "Nodes": {"items": {}}}),
            "Nodes.items must be a list, got an object",
            id="items-object",
        ),
        pytest.param(
            body({**_set(("NodeNames",), None), "Nodes": {"items": [{"metadata": {}}]}}),
            r"Nodes.items\[0\] has no metadata.name",
            id="node-without-name",
        ),
        pytest.param(
            body({**_set(("NodeNames",), None), "Nodes": {"items": [7]}}),
            r"Nodes.items\[0\] must be a Node object, got a number",
            id="node-number",
        ),
        pytest.param(
            body(_set(("Pod", "metadata"), [])), "Pod.metadata must be an object, got a list", id="metadata-list"
        ),
        pytest.param(
            body(_set(("Pod", "metadata", "annotations"), {"example.com/fpga-bitstream": 5})),
            "annotations\\['example.com/fpga-bitstream'\\] must be a string, got a number",
            id="annotation-number",
        ),
        pytest.param(body(_set(("Pod", "spec"), "x")), "Pod.spec must be an object, got a string", id="spec-string"),
        pytest.param(
            body(_set(("Pod", "spec", "containers"), {})),
            "Pod.spec.containers must be a list, got an object",
            id="containers",
        ),
        pytest.param(
            body(_set(("Pod", "spec", "containers", 0), None)),
            r"Pod.spec.containers\[0\] must be an object, got null",
            id="container-null",
        ),
        pytest.param(
            body(_set(("Pod", "spec", "containers", 0, "resources", "limits"), [])),
            r"Pod.spec.containers\[0\].resources.limits must be an object, got a list",
            id="limits-list",
        ),
        pytest.param(
            body(_set(("Pod", "spec", "containers", 0, "resources", "limits", "example.com/fpga-slot"), "1.5")),
            r"Pod.spec.containers\[0\].resources.limits\[example.com/fpga-slot\]: not a whole, non-negative count",
            id="fractional-slots",
        ),
    ],
)
def test_malformed_requests_say_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(ExtenderRequestError, match=message):
        parse_extender_args(raw)


def test_filter_answer_lists_the_same_node_objects_not_copies() -> None:
    args = sample("extender-filter-request.json")
    args["NodeNames"] = None
    args["Nodes"] = {"items": [{"metadata": {"name": n}} for n in ("a", "b", "c")]}
    request = parse_extender_args(body(args))
    assert request.nodes is not None
    answer = filter_result(request, FilterOutcome(["a", "c"], {"b": "no"}))
    assert answer["Nodes"] is not None
    items = answer["Nodes"]["items"]
    assert items is not None
    assert [i is n for i, n in zip(items, [request.nodes[0], request.nodes[2]], strict=True)] == [True, True]
    assert answer["NodeNames"] is None
    assert answer["FailedAndUnresolvableNodes"] == {"b": "no"}


@pytest.mark.parametrize(
    "hosts",
    [
        pytest.param(["node-a", "worker-0001.example.com"], id="plain"),
        pytest.param(['we"ird', "back\\slash"], id="quote-backslash"),
        pytest.param(["ünïcode", "tab\there", "\x00"], id="non-ascii-control"),
        pytest.param(["\ud800"], id="lone-surrogate"),
        pytest.param([], id="none"),
    ],
)
def test_priorities_encode_as_json(hosts: list[str]) -> None:
    scores = [(host, index % 11) for index, host in enumerate(hosts)]
    data = encode_priorities(scores)
    assert json.loads(data) == [{"Host": h, "Score": s} for h, s in scores]
    data.decode("utf-8")


@given(st.lists(st.tuples(st.text(max_size=20), st.integers(0, 10)), max_size=20))
def test_priorities_encode_as_json_for_any_names(scores: list[tuple[str, int]]) -> None:
    assert json.loads(encode_priorities(scores)) == [{"Host": h, "Score": s} for h, s in scores]

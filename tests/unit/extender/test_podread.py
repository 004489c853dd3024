"""The compiled pod reader: it reads a one-slot pod as the whole parse reads it, and declines everything else.

``sample.one_slot_head`` may decline any body (the caller then parses it whole); what it must never do is
answer for a body the whole parse refuses, or read a pod otherwise than the whole parse does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from agent.errors import ExtenderRequestError
from agent.extender import sample
from agent.extender.wire import BITSTREAM_ANNOTATION, SLOT_RESOURCE, parse_extender_args

NAMES = ["node-1", "node-2"]


def body_of(pod: object, names: list[str] | None = None, nodes: str = "null") -> bytes:
    """A body as kube-scheduler marshals it: compact, Pod, Nodes, NodeNames in that order."""
    listed = json.dumps(NAMES if names is None else names, separators=(",", ":"))
    return f'{{"Pod":{json.dumps(pod, separators=(",", ":"))},"Nodes":{nodes},"NodeNames":{listed}}}'.encode()


def whole_parse(body: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str] | str | None:
    """What the whole parse makes of the body: (pod, bitstream) of a one-slot pod, None for any other pod, or
    the error."""
    monkeypatch.setattr(sample, "COMPILED", False)
    try:
        request = parse_extender_args(body)
    except ExtenderRequestError as exc:
        return f"error: {exc}"
    demand = request.demand
    if request.dra is not None or demand.single is None or demand.single[1] != 1 or demand.unnamed:
        return None
    return demand.pod, demand.single[0]


def head(body: bytes) -> tuple[str, str] | None:
    found = sample.one_slot_head(body)
    if found is None:
        return None
    pod, bitstream, start = found
    assert body[start : start + 1] == b"["
    assert body[:start].endswith(b',"NodeNames":')
    return pod, bitstream


def one_slot_pod(**changes: Any) -> dict[str, Any]:
    """A pod as the API server returns it, with the fields a Deployment's pod carries around the ones read."""
    pod: dict[str, Any] = {
        "metadata": {
            "name": "web-7d4b9c-x2x9z",
            "generateName": "web-7d4b9c-",
            "namespace": "ml",
            "uid": "0c4c8f1e-5a8e-4b1c-9a55-0c2f0e6c1b11",
            "resourceVersion": "12345",
            "creationTimestamp": "2026-11-27T01:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
            "annotations": {
                BITSTREAM_ANNOTATION: "aes-v2",
                "kubectl.kubernetes.io/last-applied-configuration": '{"kind":"Pod","x":"a\\"b\\\\c\\n"}\n',
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c"}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:x": {}}}],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/web:1.2",
                    "args": ["--rate=0.5", "--depth", "-3", "--x=1.25e2"],
                    "resources": {
                        "limits": {"cpu": "500m", SLOT_RESOURCE: "1"},
                        "requests": {"cpu": "250m", SLOT_RESOURCE: "1"},
                    },
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                },
                {"name": "sidecar", "image": "busybox:1.35", "resources": {}},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300}],
            "priority": 0,
            "enableServiceLinks": True,
            "schedulerName": "fpga-scheduler",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }
    for path, value in changes.items():
        target = pod
        *parents, leaf = path.split("__")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is _DROP:
            del target[leaf]
        else:
            target[int(leaf) if isinstance(target, list) else leaf] = value
    return pod


_DROP = object()
#: The pod of one_slot_pod() as read.
READ = ("ml/web-7d4b9c-x2x9z", "aes-v2")


def test_a_pod_as_the_api_server_writes_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    body = body_of(one_slot_pod())
    assert head(body) == ("ml/web-7d4b9c-x2x9z", "aes-v2") == whole_parse(body, monkeypatch)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"metadata__namespace": _DROP}, ("default/web-7d4b9c-x2x9z", "aes-v2")),
        ({"metadata__namespace": ""}, ("default/web-7d4b9c-x2x9z", "aes-v2")),
        ({"metadata__name": None}, ("ml/?", "aes-v2")),
        ({"metadata__annotations__example.com/fpga-bitstream.main": "sha"}, ("ml/web-7d4b9c-x2x9z", "sha")),
        ({"metadata__annotations__example.com/fpga-bitstream.main": ""}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
        ({"metadata__annotations__example.com/fpga-bitstream.sidecar": "sha"}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
        ({"spec__containers": [{"resources": {"requests": {SLOT_RESOURCE: "1"}}}]}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
        ({"spec__containers": [{"name": 5, "resources": {"limits": {SLOT_RESOURCE: "1"}}}]}, READ),
        ({"spec__containers__0__resources__limits__example.com/fpga-slot": None}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
        ({"spec__resourceClaims": []}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
        ({"spec__resourceClaims": None}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
        ({"spec__initContainers": None}, ("ml/web-7d4b9c-x2x9z", "aes-v2")),
    ],
    ids=range(12),
)
def test_the_fields_read_are_read_as_the_whole_parse_reads_them(
    changes: dict[str, Any], expected: tuple[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = body_of(one_slot_pod(**changes))
    if expected is None:  # read alike by the whole parse, but declined here
        assert head(body) is None
        assert whole_parse(body, monkeypatch) is not None
    else:
        assert head(body) == expected == whole_parse(body, monkeypatch)


@pytest.mark.parametrize(
    "changes",
    [
        {"metadata__annotations__example.com/fpga-bitstream": _DROP},  # no bitstream: not a one-slot pod
        {"spec__containers__0__resources__limits__example.com/fpga-slot": "2"},
        {"spec__containers__0__resources__limits__example.com/fpga-slot": 1},  # a number: the whole parse judges
        {"spec__containers__0__resources__limits__example.com/fpga-slot": " 1"},
        {"spec__containers__0__resources__limits__example.com/fpga-slot": "1000m"},
        {"spec__containers__0__resources__limits__example.com/fpga-slot": "x"},  # the whole parse refuses it
        {"spec__containers__1__resources": {"limits": {SLOT_RESOURCE: "1"}}},  # two containers ask
        {"spec__initContainers": [{"name": "i", "resources": {"limits": {SLOT_RESOURCE: "1"}}}]},
        {"spec__resourceClaims": [{"name": "slot", "resourceClaimTemplateName": "t"}]},  # a DRA pod
        {"spec__resourceClaims": {}},
        {"metadata__annotations__other": 5},  # refused by the whole parse
        {"metadata__annotations__note": "caf\u00e9"},  # beyond ASCII anywhere: declined
        {"metadata__annotations__note": "\u0001"},  # an escape of \u: declined
        {"metadata__name": 5},
        {"metadata__namespace": "a\\b"},  # an escape in a value read
        {"metadata__labels__n": 1e300},  # a number with an exponent
        {"metadata__labels__n": 12345678901234567890},
        {"metadata": None},
        {"metadata": "x"},
        {"spec": []},
        {"spec__containers": {}},
        {"spec__containers": ["x"]},
        {"spec__containers__0__resources": "x"},
        {"spec__containers__0__resources__limits": []},
    ],
    ids=range(24),
)
def test_what_it_is_not_sure_of_is_declined(changes: dict[str, Any]) -> None:
    assert head(body_of(one_slot_pod(**changes))) is None


@pytest.mark.parametrize(
    "text",
    [
        '{"Pod":%s,"Pod":%s,"Nodes":null,"NodeNames":["a"]}',  # a key twice: the whole parse keeps the last
        '{"Pod":{"metadata":{"name":"x"},"metadata":%s},"NodeNames":["a"]}',
        '{"pod":%s,"NodeNames":["a"]}',  # the field by its case-insensitive name
        '{"Pod":%s ,"NodeNames":["a"]}',
        '{"Pod":%s,"Nodes":null,"NodeNames":["a","b\\"c"]}',
        '{"Pod":%s,"Nodes":[1,],"NodeNames":["a"]}',
        '{"Pod":%s,"Nodes":nul,"NodeNames":["a"]}',
        '{"Pod":%s,"Nodes":"\x01","NodeNames":["a"]}',
        '{"Pod":%s,"Nodes":01,"NodeNames":["a"]}',
        '{"Pod":%s,"Nodes":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"NodeNames":["a"]}',
        '{"Pod":%s,"NodeNames":["a"]} ',
        '{"Pod":%s,"NodeNames":["a"],}',
        '{"Pod":%s,"NodeNames":["a"]',
    ],
    ids=range(13),
)
def test_bodies_around_the_pod_are_judged_as_the_whole_parse_judges_them(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = json.dumps(one_slot_pod(), separators=(",", ":"))
    body = (text.replace("%s", pod)).encode()
    found = head(body)
    assert found is None or found == whole_parse(body, monkeypatch)


def test_spaces_between_the_tokens_are_read() -> None:
    pod = json.dumps(one_slot_pod(), indent=1)
    body = ('{"Pod": ' + pod + ' ,\n "Nodes" : null,"NodeNames":["a"]}').encode()
    assert head(body) == ("ml/web-7d4b9c-x2x9z", "aes-v2")


_ABSENT = object()


def _member(values: list[object]) -> st.SearchStrategy[object]:
    """A member's value, or the member left out (``_ABSENT``); the first value most often (nine in ten)."""
    others = [*values[1:], _ABSENT]
    return st.sampled_from([values[0]] * (9 * len(others)) + others)


def _mostly(usual: st.SearchStrategy[object], other: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """``usual`` nine times in ten."""
    return st.one_of(*[usual] * 9, other)


def _present(members: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in members.items() if value is not _ABSENT}


_slots = _member(["1", "0", "2", 1, None, "1 ", {}])
_resources = st.builds(
    lambda limits, requests, other: _present(
        {
            "limits": _present({SLOT_RESOURCE: limits, "cpu": "1"} if other else {SLOT_RESOURCE: limits}),
            "requests": requests,
        }
    ),
    _slots,
    _mostly(_member([None]), st.builds(lambda v: _present({SLOT_RESOURCE: v}), _slots)),
    st.booleans(),
)
_container = st.builds(
    lambda name, resources: _present({"name": name, "resources": resources}),
    _member(["main", "side", "", None, 5]),
    _mostly(_resources, _member([None, "x", []])),
)
#: The container that asks, and mostly sidecars that do not.
_containers = st.builds(
    lambda main, others: [main, *others],
    _container,
    st.lists(_mostly(st.just({"name": "side", "resources": {}}), _container), max_size=2),
)
_annotations = st.builds(
    lambda pod_wide, main, side, unnamed, other: _present(
        {
            BITSTREAM_ANNOTATION: pod_wide,
            f"{BITSTREAM_ANNOTATION}.main": main,
            f"{BITSTREAM_ANNOTATION}.side": side,
            f"{BITSTREAM_ANNOTATION}.": unnamed,
            "other": other,
        }
    ),
    _member(["aes", "", 5, "a\\b"]),
    st.sampled_from([_ABSENT, _ABSENT, "sha", ""]),
    st.sampled_from([_ABSENT, _ABSENT, "fft"]),
    st.sampled_from([_ABSENT, _ABSENT, "big", ""]),
    _member(['{"x":"a\\"b"}', 5, None, "caf\u00e9"]),
)
_pods = st.builds(
    lambda name, namespace, annotations, containers, init, claims, status: _present(
        {
            "metadata": _present({"name": name, "namespace": namespace, "annotations": annotations}),
            "spec": _present({"containers": containers, "initContainers": init, "resourceClaims": claims}),
            "status": status,
        }
    ),
    _member(["p", "", None, 5]),
    _member(["ns", "", None]),
    _mostly(_annotations, _member([None, []])),
    _mostly(_containers, _member([None, {}])),
    _mostly(_member([None, []]), st.lists(_container, max_size=2)),
    _member([None, [], [{"name": "slot"}], {}]),
    _member([{"phase": "Pending"}, 1.5, [1, -2, 0.25]]),
)


def test_the_generated_pods_include_one_slot_pods_read_and_others() -> None:
    """The generator below makes pods of both kinds (else its test would check declines alone); ``find``
    raises when it finds no example."""
    find(_pods, lambda pod: head(body_of(pod)) is not None, settings=settings(database=None))
    find(_pods, lambda pod: head(body_of(pod)) is None, settings=settings(database=None))


@settings(max_examples=1500, deadline=None)
@given(pod=_pods)
def test_generated_pods_are_read_as_the_whole_parse_reads_them_or_declined(pod: dict[str, Any]) -> None:
    body = body_of(pod)
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = whole_parse(body, monkeypatch)
    found = head(body)
    assert found is None or found == expected


@settings(max_examples=1500, deadline=None)
@given(prefix=st.text(alphabet='{}[]:,"\\ 0123456789.-eEtrufalsn/Podmetaspc', max_size=60))
def test_garbled_members_before_the_names_never_pass_for_a_pod(prefix: str) -> None:
    body = ('{"Pod":' + prefix + ',"NodeNames":["a"]}').encode()
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = whole_parse(body, monkeypatch)
    found = head(body)
    assert found is None or found == expected

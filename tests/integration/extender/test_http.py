"""The extender over real HTTP: the wire as kube-scheduler v1.36 speaks it, in both node modes."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp.web_protocol import RequestHandler

import agent.extender.ranking
from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights
from agent.extender.server import Extender
from tests.integration.extender.conftest import (
    MODES,
    NOW,
    Cluster,
    ExtenderUnderTest,
    Mode,
    extender_args,
    pod,
    ranking,
    sample,
    settled,
    shifted,
)
from tests.unit.extender.factories import N3K, slot

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")


# --- wire compatibility with the captured calls -------------------------------------------


async def test_captured_filter_call_gets_an_answer_of_the_captured_shape(extender: ExtenderUnderTest) -> None:
    extender.publish(Cluster())
    status, answer = await extender.post("/filter", sample("extender-filter-request.json"))
    captured = sample("extender-filter-response.json")

    assert status == 200
    assert {key: answer[key] for key in captured} == captured
    assert answer["Nodes"] is None  # Go's *NodeList: null in nodeCacheCapable mode


async def test_captured_prioritize_call_gets_an_answer_of_the_captured_shape(extender: ExtenderUnderTest) -> None:
    status, answer = await extender.post("/prioritize", sample("extender-prioritize-request.json"))
    captured = sample("extender-prioritize-response.json")

    assert status == 200
    assert isinstance(captured, list)
    # The captured pod names no bitstream: the same neutral score on every node, which shifted to
    # the floor is 0 everywhere, so nothing is listed (kube-scheduler reads a missing node as 0).
    assert answer == []


async def test_full_node_objects_come_back_unchanged(extender: ExtenderUnderTest) -> None:
    cluster = Cluster()
    cluster.add("fits", [slot("s0")])
    cluster.add("other-platform", [slot("s0", platform=N3K)])
    cluster.add("no-state", None)
    extender.publish(cluster)
    args = extender_args(pod("aes"), ["fits", "other-platform", "no-state"], "nodes", cluster)

    status, answer = await extender.post("/filter", args)

    assert status == 200
    assert answer["NodeNames"] is None
    assert answer["Nodes"]["items"] == [args["Nodes"]["items"][0], args["Nodes"]["items"][2]]
    assert list(answer["FailedAndUnresolvableNodes"]) == ["other-platform"]
    assert answer["FailedNodes"] == {}
    assert answer["Error"] == ""


async def test_lowercase_field_names_are_read_as_gos_decoder_reads_them(extender: ExtenderUnderTest) -> None:
    args = sample("extender-filter-request.json")
    status, answer = await extender.post("/filter", {"pod": args["Pod"], "nodenames": ["a", "b"]})
    assert status == 200
    assert answer["NodeNames"] == ["a", "b"]


# --- filter and prioritize tables, end to end in both modes ---------------------------------

FILTER_TABLE = [
    pytest.param(pod("aes"), {"hit": [slot("s0", bitstream="aes")]}, [], id="loaded-slot-passes"),
    pytest.param(pod("aes"), {"held": [slot("s0", free=False)]}, [], id="held-slot-passes"),
    pytest.param(pod("aes"), {"unknown": None}, [], id="no-state-passes"),
    pytest.param(
        pod("aes", slots=2),
        {"small": [slot("s0")]},
        ["small"],
        id="too-few-slots-fails",
    ),
    pytest.param(pod("zzz"), {"n": [slot("s0")]}, ["n"], id="unknown-bitstream-fails"),
    pytest.param(pod(None), {"n": [slot("s0", platform=N3K)]}, [], id="no-bitstream-passes"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("the_pod", "nodes", "failing"), FILTER_TABLE)
async def test_filter_table(
    extender: ExtenderUnderTest,
    mode: Mode,
    the_pod: dict[str, Any],
    nodes: dict[str, list[dict[str, Any]] | None],
    failing: list[str],
) -> None:
    cluster = Cluster()
    for name, slots in nodes.items():
        cluster.add(name, slots)
    extender.publish(cluster)

    status, answer = await extender.post("/filter", extender_args(the_pod, list(nodes), mode, cluster))

    assert status == 200
    assert sorted(answer["FailedAndUnresolvableNodes"]) == failing
    passed = answer["NodeNames"] if mode == "names" else [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert passed == [name for name in nodes if name not in failing]


async def test_filter_reason_names_the_bitstream_and_the_counts(extender: ExtenderUnderTest) -> None:
    cluster = Cluster()
    cluster.add("small", [slot("s0"), slot("s1", healthy=False)])
    cluster.add("lacking", [slot("s0")], {"sha": "pac_a10"})
    extender.publish(cluster)

    _status, answer = await extender.post(
        "/filter", extender_args(pod("aes", 2), ["small", "lacking"], "names", cluster)
    )

    assert answer["FailedAndUnresolvableNodes"] == {
        "small": 'bitstream "aes" (platform pac_a10) needs 2 healthy slots of that platform, the node has 1',
        "lacking": """the node's catalog has no bitstream "aes\"""",
    }
    assert answer["NodeNames"] == []


@pytest.mark.parametrize("mode", MODES)
async def test_prioritize_ranks_loaded_then_empty_then_eviction_by_age(extender: ExtenderUnderTest, mode: Mode) -> None:
    cluster = Cluster()
    cluster.add("loaded", [slot("s0", bitstream="aes"), slot("s1")])
    cluster.add("empty", [slot("s0")])
    cluster.add("evict-old", [slot("s0", bitstream="sha", last_used=NOW - 7200)])
    cluster.add("evict-recent", [slot("s0", bitstream="sha", last_used=NOW - 10)])
    cluster.add("full", [slot("s0", bitstream="aes", free=False)])
    cluster.add("no-state", None)
    extender.publish(cluster)
    names = ["full", "evict-recent", "no-state", "empty", "evict-old", "loaded"]

    status, answer = await extender.post("/prioritize", extender_args(pod("aes"), names, mode, cluster))

    assert status == 200
    # a slot unused for two hours is as cheap as an empty one; one used a moment ago is worth keeping
    assert ranking(answer, names) == [0, 1, 5, 7, 7, 10]  # "full" is the floor: left out
    assert sorted(entry["Host"] for entry in answer) == sorted(names[1:])  # the scheduler does not read the order


@pytest.mark.parametrize("mode", MODES)
async def test_an_answer_lists_the_best_nodes_by_score_then_packing_then_order(mode: Mode) -> None:
    """Six nodes stand out above the floor; a limit of three keeps the copy holder, then of the empty ones
    the fullest (the scheduler's MostAllocated: 3 of 4 slots in use with the pod), then the first asked."""
    cluster = Cluster()
    held = slot("h", free=False)
    cluster.add("floor", [slot("s0", bitstream="sha", last_used=NOW - 10)])  # just used: 1, the floor
    cluster.add("copy", [slot("s0", bitstream="aes"), slot("s1"), slot("s2"), slot("s3")])  # 10
    cluster.add("full", [slot("s0"), slot("s1"), held, slot("h2", free=False)])  # 7, packing 75
    for name in ("e1", "e2", "e3"):
        cluster.add(name, [slot("s0"), slot("s1"), slot("s2"), slot("s3")])  # 7, packing 25
    cluster.add("no-state", None)  # neutral 5: above the floor, below the empty ones
    names = ["e3", "floor", "e1", "no-state", "full", "e2", "copy"]
    async with ExtenderUnderTest(answer_limit=3) as extender:
        extender.publish(cluster)
        status, answer = await extender.post("/prioritize", extender_args(pod("aes"), names, mode, cluster))
    assert status == 200
    ranking(answer, names)  # each name once, every one asked, the floor not listed
    assert {e["Host"]: e["Score"] for e in answer} == {"copy": 9, "full": 6, "e3": 6}  # the floor: 1


async def test_weights_from_the_configuration_are_used() -> None:
    weights = ScoreWeights(loaded=8, empty=2, evict=1, neutral=3)
    async with ExtenderUnderTest(weights) as extender:
        cluster = Cluster()
        cluster.add("loaded", [slot("s0", bitstream="aes")])
        cluster.add("empty", [slot("s0")])
        cluster.add("x", None)  # publishes nothing: neutral
        extender.publish(cluster)
        _, scored = await extender.post(
            "/prioritize", extender_args(pod("aes"), ["loaded", "empty", "x"], "names", cluster)
        )
        _, neutral = await extender.post("/prioritize", extender_args(pod(None), ["loaded"], "names", cluster))
    assert ranking(scored, ["loaded", "empty", "x"]) == shifted([8, 2, 3])
    assert neutral == []


# --- stale and missing state ---------------------------------------------------------------


async def test_answers_follow_the_node_cache(extender: ExtenderUnderTest) -> None:
    names = ["n1", "unpublished"]  # the second never publishes: neutral (5) throughout
    args = extender_args(pod("aes"), names, "names", Cluster())

    assert ranking((await extender.post("/prioritize", args))[1], names) == [0, 0]  # not synced: both unknown

    cluster = Cluster()
    cluster.add("n1", [slot("s0")])
    cluster.add("unpublished", None)
    extender.publish(cluster)
    assert ranking((await extender.post("/prioritize", args))[1], names) == shifted([7, 5])

    cluster.add("n1", [slot("s0", bitstream="aes")])
    extender.cache.apply_watched("MODIFIED", next(w for w in cluster.watched() if w.name == "n1"))
    assert ranking((await extender.post("/prioritize", args))[1], names) == shifted([10, 5])

    cluster.add("n1", [slot("s0", bitstream="sha", free=False)])
    extender.cache.apply_watched("MODIFIED", next(w for w in cluster.watched() if w.name == "n1"))
    assert ranking((await extender.post("/prioritize", args))[1], names) == shifted([0, 5])

    extender.cache.apply_watched("DELETED", next(w for w in cluster.watched() if w.name == "n1"))
    assert ranking((await extender.post("/prioritize", args))[1], names) == [0, 0]
    assert (await extender.post("/filter", args))[1]["NodeNames"] == names


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"nodeName": "broken", "slots": "[{", "bitstreams": {}}, id="slots-not-a-list"),
        pytest.param({"nodeName": "broken", "slots": [{"id": 1}], "bitstreams": {}}, id="slot-without-fields"),
        pytest.param({"nodeName": "broken", "slots": [], "bitstreams": ["aes"]}, id="catalog-not-an-object"),
        pytest.param({"nodeName": "elsewhere", "slots": [], "bitstreams": {}}, id="another-node's"),
    ],
)
async def test_malformed_published_state_is_no_state(
    extender: ExtenderUnderTest, mode: Mode, broken: dict[str, Any]
) -> None:
    cluster = Cluster()
    cluster.raw_specs["broken"] = broken
    cluster.add("empty", [slot("s0")])
    extender.publish(cluster)
    args = extender_args(pod("aes"), ["broken", "empty"], mode, cluster)

    status, answer = await extender.post("/prioritize", args)
    assert status == 200
    assert ranking(answer, ["broken", "empty"]) == shifted([5, 7])  # broken: neutral, as if unpublished
    status, answer = await extender.post("/filter", args)
    assert status == 200
    assert answer["FailedAndUnresolvableNodes"] == {}


async def test_healthz_is_ready_once_the_node_cache_synced(extender: ExtenderUnderTest) -> None:
    assert await extender.get("/healthz") == (503, "node state not synced yet\n")
    extender.cache.replace({})
    assert await extender.get("/healthz") == (200, "ok\n")
    extender.cache.failed("listing nodes failed: connection refused")  # a later relist failing: still serving
    assert await extender.get("/healthz") == (200, "ok\n")


# --- load: many names, many calls at once --------------------------------------------------


async def test_five_thousand_names(extender: ExtenderUnderTest) -> None:
    extender.cache.replace(
        {
            w.name: w.state
            for i in range(5000)
            for w in _cluster_of_one(f"node-{i:04d}", "aes" if i % 3 == 0 else None).watched()
        }
    )
    names = [f"node-{i:04d}" for i in range(5000)]
    status, answer = await extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": names})
    assert status == 200
    # 1667 nodes hold a copy (10, the rest 7), all alike in packing: the first ANSWER_LIMIT of them asked,
    # one of them promised the copy and kept on top, the others one lower
    assert sorted(e["Host"] for e in answer) == sorted(names[::3][:ANSWER_LIMIT])
    assert sorted(e["Score"] for e in answer) == [2] * (ANSWER_LIMIT - 1) + [3]
    unlimited = Extender(extender.cache, ScoreWeights(), clock=lambda: NOW, answer_limit=0)
    every = json.loads(unlimited.prioritize(json.dumps({"Pod": pod("aes"), "NodeNames": names}).encode())[1])
    assert settled(ranking(every, names), shifted([10 if i % 3 == 0 else 7 for i in range(5000)]))
    assert sorted(e["Host"] for e in every) == names[::3]  # only the nodes above the floor

    status, filtered = await extender.post("/filter", {"Pod": pod("aes", slots=2), "NodeNames": names})
    assert status == 200
    assert filtered["NodeNames"] == names  # two healthy slots each


def _cluster_of_one(name: str, loaded: str | None) -> Cluster:
    cluster = Cluster()
    cluster.add(name, [slot("s0", bitstream=loaded), slot("s1", free=False)])
    return cluster


async def test_concurrent_calls_each_get_their_own_answer(extender: ExtenderUnderTest) -> None:
    cluster = Cluster()
    for i in range(20):
        cluster.add(f"n{i}", [slot("s0", bitstream=("aes", "sha", None)[i % 3])])
    extender.publish(cluster)
    names = [f"n{i}" for i in range(20)]
    # Slots never used are as cheap to overwrite as empty ones (7).
    expected = {
        "aes": [10 if i % 3 == 0 else 7 for i in range(20)],
        "sha": [7 if i % 3 == 0 else 10 if i % 3 == 1 else 7 for i in range(20)],
        None: [5] * 20,
    }

    async def call(bitstream: str | None) -> tuple[str | None, list[int]]:
        _, answer = await extender.post("/prioritize", extender_args(pod(bitstream), names, "names", cluster))
        return bitstream, ranking(answer, names)

    wanted = [("aes", "sha", None)[i % 3] for i in range(150)]
    results = await asyncio.gather(*(call(b) for b in wanted))

    assert len(results) == 150
    for bitstream, scores in results:
        assert settled(scores, shifted(expected[bitstream])), bitstream


# --- robust edges ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
@pytest.mark.parametrize(
    ("raw", "error"),
    [
        pytest.param(b"not json", "the body is not JSON", id="not-json"),
        pytest.param(b"[1, 2]", "the body must be a JSON object (ExtenderArgs), got a list", id="list"),
        pytest.param(b'{"NodeNames": []}', "Pod must be an object, got null", id="no-pod"),
        pytest.param(b"", "the body is not JSON", id="empty"),
    ],
)
async def test_malformed_bodies_get_400_with_error(
    extender: ExtenderUnderTest, path: str, raw: bytes, error: str
) -> None:
    status, answer = await extender.post_raw(path, raw)
    assert status == 400
    assert answer["Error"].startswith(error)
    if path == "/filter":  # the filter result carries its own Error field; the rest is empty
        assert answer == {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": answer["Error"],
        }


async def test_a_body_over_the_limit_gets_413_with_error() -> None:
    async with ExtenderUnderTest(max_body_bytes=1024) as extender:
        names = [f"node-{i}" for i in range(200)]
        status, answer = await extender.post("/filter", {"Pod": pod("aes"), "NodeNames": names})
    assert status == 413
    assert answer == {"Error": "the body is larger than 1024 bytes"}


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/filter", 405, id="get-filter"),
        pytest.param("POST", "/bind", 404, id="unknown-verb"),
        pytest.param("POST", "/healthz", 405, id="post-healthz"),
    ],
)
async def test_unknown_routes_answer_json_errors(
    extender: ExtenderUnderTest, method: str, path: str, status: int
) -> None:
    assert extender.session is not None
    async with extender.session.request(method, extender.url + path, data=b"{}") as response:
        assert response.status == status
        body = json.loads(await response.read())
    assert body["Error"].startswith(f"{status} ")
    assert path in body["Error"]


async def test_a_bug_is_a_500_with_one_line_and_no_traceback(
    extender: ExtenderUnderTest, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> int:
        raise RuntimeError("bug in scoring")

    cluster = Cluster()
    cluster.add("n", [slot("s0")])
    extender.publish(cluster)
    monkeypatch.setattr(agent.extender.ranking, "one_slot_ranks", broken)
    status, answer = await extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": ["n"]})

    assert status == 500
    assert answer == {"Error": "internal error (RuntimeError)"}
    assert "Traceback" not in json.dumps(answer)
    assert any("extender: POST /prioritize failed" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_calls_on_one_kept_alive_connection(extender: ExtenderUnderTest) -> None:
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(20):
            async with session.post(
                extender.url + "/prioritize", json={"Pod": pod(None), "NodeNames": ["a"]}
            ) as response:
                assert response.status == 200
                await response.read()
        opened = len(connector._conns)
    assert opened == 1


async def test_each_connection_has_nagle_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """No delayed-ACK stall on kept-alive connections: TCP_NODELAY on every connection the server accepts."""
    nodelay: list[int] = []
    connection_made = RequestHandler.connection_made

    def recording(handler: RequestHandler, transport: Any) -> None:
        connection_made(handler, transport)
        nodelay.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    monkeypatch.setattr(RequestHandler, "connection_made", recording)
    async with ExtenderUnderTest() as extender:
        for path in ("/prioritize", "/filter"):
            status, _ = await extender.post(path, {"Pod": pod("aes"), "NodeNames": ["n"]})
            assert status == 200
    assert nodelay
    assert set(nodelay) == {1}

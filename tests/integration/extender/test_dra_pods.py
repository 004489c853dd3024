"""``fpga-agent extender`` scores DRA pods: it watches ResourceClaimTemplates through the API server (the HTTP fake)
and answers prioritize for a pod that names one, by the slot the scheduler's allocator would take on each node."""

from __future__ import annotations

import asyncio
import copy
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.fakeapi import FakeKubeApiServer, make_node
from tests.integration.extender.conftest import (
    LISTENING,
    PROCESS_TIMEOUT_S,
    ExtenderProcess,
    publish_state,
    running_extender,
)
from tests.unit.extender.factories import PAC, slot

EXAMPLE = Path(__file__).parents[3] / "daemonset" / "examples" / "dra" / "cached-first.yaml"
NAMES = ["fpga-1", "fpga-2", "fpga-3", "fpga-4"]
CATALOG = {"aes-v1": PAC, "sha-v1": PAC}
POLL_S = 0.05
#: An empty free slot beside a busy one; two empty free slots.
FPGA_2 = [slot("s0"), slot("s1", free=False)]
FPGA_5 = [slot("s0"), slot("s1")]
POLLS = int(PROCESS_TIMEOUT_S / POLL_S)


def shipped() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped cache-aware ResourceClaimTemplate and the pod that names it."""
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(EXAMPLE.read_text())}
    template = documents["ResourceClaimTemplate"]
    template["metadata"]["namespace"] = "default"
    return template, documents["Pod"]


@pytest.fixture
async def extender(apiserver: FakeKubeApiServer, tmp_path: Path) -> AsyncIterator[tuple[str, ExtenderProcess]]:
    """The extender as a process, over five nodes: a free copy of aes-v1 (fpga-1), an empty free slot beside a
    busy one (fpga-2), a slot whose sha-v1 was used a minute ago (fpga-3), no free slot of the platform (fpga-4),
    two empty free slots (fpga-5)."""
    minute_ago = int(time.time()) - 60
    publish_state(apiserver, "fpga-1", [slot("s0", bitstream="aes-v1", last_used=1)], CATALOG)
    publish_state(apiserver, "fpga-2", FPGA_2, CATALOG)
    publish_state(apiserver, "fpga-3", [slot("s0", bitstream="sha-v1", last_used=minute_ago)], CATALOG)
    publish_state(apiserver, "fpga-4", [slot("s0", free=False)], CATALOG)
    publish_state(apiserver, "fpga-5", FPGA_5, CATALOG)
    apiserver.put_resource_claim_template(shipped()[0])
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    async with running_extender("extender", "--listen", "127.0.0.1:0", "--kubeconfig", str(kubeconfig)) as running:
        port = int((await running.wait_for_line(LISTENING))[1])
        await running.wait_for_line(re.compile(r"node cache synced: 5 nodes"))
        await running.wait_for_line(re.compile(r"ResourceClaimTemplates listed: 1"))
        yield f"http://127.0.0.1:{port}", running


async def prioritize(
    session: aiohttp.ClientSession, url: str, pod: dict[str, Any], names: list[str] = NAMES
) -> list[dict[str, Any]]:
    """The answer for ``pod`` over ``names``: for a DRA pod, the one best node (``DRA_ANSWER_LIMIT``)."""
    async with session.post(url + "/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": names}) as response:
        assert response.status == 200
        answer: list[dict[str, Any]] = await response.json()
        return answer


async def prioritize_nodes(
    session: aiohttp.ClientSession, url: str, pod: dict[str, Any], names: list[str]
) -> list[dict[str, Any]]:
    """The answer for ``pod`` over nodes sent whole, as kube-scheduler sends them to an extender that is not
    nodeCacheCapable (their state is still the published one)."""
    items = [make_node(name) for name in names]
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    async with session.post(url + "/prioritize", json=body) as response:
        assert response.status == 200
        answer: list[dict[str, Any]] = await response.json()
        return answer


async def answer_once(
    session: aiohttp.ClientSession, url: str, pod: dict[str, Any], holds: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The first answer that ``holds``: a watch event reaches the extender a moment after the API server has it."""
    for _ in range(POLLS):
        answer = await prioritize(session, url, pod)
        if holds(answer):
            return answer
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"the extender's answer never changed: {answer}")


async def test_a_dra_pod_is_scored_by_its_claim_template(
    apiserver: FakeKubeApiServer, extender: tuple[str, ExtenderProcess]
) -> None:
    url, process = extender
    template, pod = shipped()
    async with aiohttp.ClientSession() as session:
        # fpga-1 holds aes-v1 free: 10; fpga-2 programs its empty slot: 7; fpga-3 overwrites sha-v1, used a
        # minute ago: 7 - 6 x 0.98 -> 1; fpga-4 has no free slot: 0 (the floor, left out). A DRA pod's
        # answer lists the best node only; asked without the better ones, the next shows its score.
        assert await prioritize(session, url, pod) == [{"Host": "fpga-1", "Score": 10}]
        assert await prioritize(session, url, pod, ["fpga-2", "fpga-3", "fpga-4"]) == [{"Host": "fpga-2", "Score": 7}]
        assert await prioritize(session, url, pod, ["fpga-3", "fpga-4"]) == [{"Host": "fpga-3", "Score": 1}]
        # fpga-5 and fpga-2 both program an empty slot (7 each): the fuller one (fpga-2) is listed, as no
        # scheduler plugin packs DRA slots.
        assert await prioritize(session, url, pod, ["fpga-5", "fpga-2"]) == [{"Host": "fpga-2", "Score": 1}]
        # The same two nodes sent whole (a profile without nodeCacheCapable): the same answer.
        assert await prioritize_nodes(session, url, pod, ["fpga-5", "fpga-2"]) == [{"Host": "fpga-2", "Score": 1}]

        # The template changes (through the watch): now fpga-3 holds the bitstream asked for.
        changed = copy.deepcopy(template)
        changed["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["bitstream"] = "sha-v1"
        apiserver.put_resource_claim_template(changed)
        answer = await answer_once(session, url, pod, lambda answer: answer[0]["Host"] == "fpga-3")
        assert answer == [{"Host": "fpga-3", "Score": 10}]
        # fpga-1's aes-v1 was last used long ago: as cheap to overwrite as an empty slot
        assert await prioritize(session, url, pod, ["fpga-1", "fpga-4"]) == [{"Host": "fpga-1", "Score": 7}]

        # A claim named directly (no template, no annotation): neutral everywhere, no node stands out.
        named = copy.deepcopy(pod)
        named["spec"]["resourceClaims"] = [{"name": "fpga", "resourceClaimName": "made-by-hand"}]
        assert await prioritize(session, url, named) == []
        # With the annotation, its bitstream in one slot.
        named["metadata"]["annotations"] = {"example.com/fpga-bitstream": "aes-v1"}
        assert (await prioritize(session, url, named))[0] == {"Host": "fpga-1", "Score": 10}

        # The template goes: its pods score neutrally.
        apiserver.delete_resource_claim_template("default", template["metadata"]["name"])
        await answer_once(session, url, pod, lambda answer: answer == [])
    assert apiserver.watch_requests("resourceclaimtemplates")
    assert "Traceback" not in "".join(process.log)

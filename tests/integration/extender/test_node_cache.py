"""The state table fed by the real watch: the kubernetes client against the fake API server.

The wiring is the CLI's: ``Watcher`` (agent.kube) lists and watches the FpgaNodeStates
and parses each one with ``read_published_state`` in its thread; ``StateTable`` takes the
results on the loop. Tests wait on what the table heard, never on time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes import client

from agent.cluster.extenderservice import in_namespace
from agent.extender.nodestate import WatchedNode, read_published_state
from agent.extender.table import StateTable
from agent.kube.reflector import Backoff, Watcher, WatchEventKind
from tests.fakeapi import FakeKubeApiServer
from tests.integration.extender.conftest import ExtenderUnderTest, pod, ranking, settled
from tests.unit.extender.factories import slot, state_object_of

pytestmark = pytest.mark.usefixtures("no_leaked_tasks", "no_leaked_threads")

FAST_BACKOFF = Backoff(initial_s=0.01, max_s=0.05)
TIMEOUT_S = 10.0


class Heard:
    """The cache's feed, recorded so that tests can wait for the next list or event."""

    def __init__(self, cache: StateTable) -> None:
        self.cache = cache
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    def replace(self, nodes: list[WatchedNode]) -> None:
        self.cache.replace_watched(nodes)
        self.queue.put_nowait(("LIST", ",".join(sorted(n.name for n in nodes))))

    def event(self, kind: WatchEventKind, node: WatchedNode) -> None:
        self.cache.apply_watched(kind, node)
        self.queue.put_nowait((kind, node.name))

    async def next(self) -> tuple[str, str]:
        async with asyncio.timeout(TIMEOUT_S):
            return await self.queue.get()

    async def until(self, holds: Callable[[StateTable], bool]) -> None:
        """Take lists and events until the cache satisfies ``holds``."""
        while not holds(self.cache):
            await self.next()


@contextlib.asynccontextmanager
async def watching(api_client: client.ApiClient) -> AsyncIterator[tuple[StateTable, Heard]]:
    cache = StateTable()
    heard = Heard(cache)
    watcher = Watcher(
        api_client,
        "fpganodestates",
        parse=read_published_state,
        on_replace=heard.replace,
        on_event=heard.event,
        on_error=cache.failed,
        backoff=FAST_BACKOFF,
    )
    task = asyncio.create_task(watcher.run(), name="node-watch-under-test")
    try:
        yield cache, heard
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def published(*loaded: str | None) -> dict[str, Any]:
    """A node's FpgaNodeState spec with one slot per entry of ``loaded``."""
    spec = state_object_of("any", [slot(f"s{i}", bitstream=b) for i, b in enumerate(loaded)])["spec"]
    return {"slots": spec["slots"], "bitstreams": spec["bitstreams"]}


def put_state(api: FakeKubeApiServer, node: str, spec: dict[str, Any]) -> None:
    """The node's FpgaNodeState as its agent writes it (``spec`` without its node name)."""
    metadata = {
        "name": node,
        "namespace": "fpga-slot",
        "uid": f"uid-{node}",
        "creationTimestamp": "2026-12-06T00:00:00Z",
    }
    api.put_node_state({"metadata": metadata, "spec": {"nodeName": node, **spec}})


BROKEN: dict[str, Any] = {"slots": "{", "bitstreams": {}}


async def test_first_list_keeps_nodes_with_valid_state(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    put_state(apiserver, "fpga-1", published("aes", None))
    put_state(apiserver, "broken", BROKEN)

    async with watching(api_client) as (cache, heard):
        assert not cache.synced
        assert await heard.next() == ("LIST", "broken,fpga-1")
        assert cache.synced
        assert len(cache.nodes) == 1
        state = cache.nodes.get("fpga-1")
        assert state is not None
        assert dict(state.free_loaded) == {("aes", "pac_a10"): 1}
        assert cache.nodes.get("broken") is None

    first = apiserver.list_requests("fpganodestates")[0]
    assert first.query["resourceVersion"] == "0"
    assert "labelSelector" not in first.query


async def test_watch_adds_updates_and_removes(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    async with watching(api_client) as (cache, heard):
        assert await heard.next() == ("LIST", "")
        await apiserver.until(lambda: apiserver.active_watches("fpganodestates") == 1)

        put_state(apiserver, "n1", published(None))
        assert await heard.next() == ("ADDED", "n1")
        assert dict(cache.nodes.get("n1").free_empty) == {"pac_a10": 1}  # type: ignore[union-attr]

        put_state(apiserver, "n1", published("sha"))
        assert await heard.next() == ("MODIFIED", "n1")
        assert dict(cache.nodes.get("n1").free_loaded) == {("sha", "pac_a10"): 1}  # type: ignore[union-attr]

        put_state(apiserver, "n1", BROKEN)  # unusable: none
        assert await heard.next() == ("MODIFIED", "n1")
        assert cache.nodes.get("n1") is None

        put_state(apiserver, "n1", published("aes"))
        assert await heard.next() == ("MODIFIED", "n1")
        apiserver.delete_node_state("fpga-slot", "n1")
        assert await heard.next() == ("DELETED", "n1")
        assert cache.nodes.get("n1") is None
    assert len(apiserver.list_requests("fpganodestates")) == 1


@pytest.mark.parametrize(
    "interrupt",
    [
        pytest.param(FakeKubeApiServer.expire_watches, id="410-gone"),
        pytest.param(FakeKubeApiServer.drop_watches, id="dropped-watch"),
    ],
)
async def test_relist_after_an_interrupted_watch(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, interrupt: object
) -> None:
    put_state(apiserver, "n1", published("aes"))
    async with watching(api_client) as (cache, heard):
        assert await heard.next() == ("LIST", "n1")
        await apiserver.until(lambda: apiserver.active_watches("fpganodestates") == 1)

        apiserver.compact()
        interrupt(apiserver, "fpganodestates")  # type: ignore[operator]
        apiserver.delete_node_state("fpga-slot", "n1")
        put_state(apiserver, "n2", published(None))

        # The relist may come before or after the changes: either way the cache ends up right.
        await heard.until(lambda c: c.nodes.get("n1") is None and c.nodes.get("n2") is not None)
        await apiserver.until(lambda: len(apiserver.list_requests("fpganodestates")) >= 2)
        assert cache.synced


async def test_handlers_never_call_the_api_server(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    for i in range(5):
        put_state(apiserver, f"n{i}", published("aes" if i % 2 else None))
    async with watching(api_client) as (cache, heard), ExtenderUnderTest() as extender:
        extender.extender.table = cache
        assert (await heard.next())[0] == "LIST"
        await apiserver.until(lambda: apiserver.active_watches("fpganodestates") == 1)
        before = len(apiserver.requests())

        names = [f"n{i}" for i in range(5)] + ["not-a-node"]  # a name without published state: neutral (5)
        calls = [extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": names}) for _ in range(30)]
        calls += [extender.post("/filter", {"Pod": pod("aes"), "NodeNames": names}) for _ in range(30)]
        answers = await asyncio.gather(*calls)
        assert await extender.get("/healthz") == (200, "ok\n")

        assert len(apiserver.requests()) == before
        assert answers[0][0] == 200
        assert settled(ranking(answers[0][1], names), [2, 5, 2, 5, 2, 0])  # 7, 10, 7, 10, 7, 5 shifted

        put_state(apiserver, "n0", published("aes"))
        assert await heard.next() == ("MODIFIED", "n0")
        _, answer = await extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": names})
        assert settled(ranking(answer, names), [5, 5, 2, 5, 2, 0])


def test_the_extenders_watch_takes_only_its_installs_objects() -> None:
    """Another install's agents (another namespace) publish for their own extender, not for this one."""
    parse = in_namespace("fpga-slot")
    spec = {"nodeName": "n1", **published("aes")}
    mine = parse({"metadata": {"name": "n1", "namespace": "fpga-slot", "resourceVersion": "3"}, "spec": spec})
    assert mine.name == "n1"
    assert mine.state is not None
    with pytest.raises(ValueError, match="outside namespace fpga-slot"):
        parse({"metadata": {"name": "n1", "namespace": "other"}, "spec": spec})

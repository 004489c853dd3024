"""The node cache fed by the real node watch: the kubernetes client against the fake API server.

The wiring is the CLI's: ``NodeWatcher`` (agent.kube) lists and watches Nodes and
parses each one with ``parse_watched_node`` in its thread; ``StateTable`` takes the
results on the loop. Tests wait on what the cache heard, never on time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from kubernetes import client

from agent.extender import StateTable, WatchedNode, parse_watched_node
from agent.kube import Backoff
from agent.kube.nodewatch import NodeWatcher
from agent.kube.reflector import WatchEventKind
from tests.fakeapi import FakeKubeApiServer
from tests.integration.extender.conftest import ExtenderUnderTest, pod, ranking, settled
from tests.unit.extender.factories import annotations, slot

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
    watcher = NodeWatcher(
        api_client,
        parse=parse_watched_node,
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


def published(*loaded: str | None) -> dict[str, str]:
    return annotations([slot(f"s{i}", bitstream=b) for i, b in enumerate(loaded)])


async def test_first_list_keeps_nodes_with_valid_state(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node("fpga-1", annotations=published("aes", None))
    apiserver.add_node("plain")
    apiserver.add_node("broken", annotations={"example.com/fpga-slots": "{", "example.com/fpga-bitstreams": "{}"})

    async with watching(api_client) as (cache, heard):
        assert not cache.synced
        assert await heard.next() == ("LIST", "broken,fpga-1,plain")
        assert cache.synced
        assert len(cache) == 1
        state = cache.nodes.get("fpga-1")
        assert state is not None
        assert dict(state.free_loaded) == {("aes", "pac_a10"): 1}
        assert cache.nodes.get("plain") is None
        assert cache.nodes.get("broken") is None

    first = apiserver.list_requests("nodes")[0]
    assert first.query["resourceVersion"] == "0"
    assert "labelSelector" not in first.query


async def test_one_node_nested_100000_deep_costs_only_that_node(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    """It once raised RecursionError out of the parser: the watch relisted forever and saw no other change."""
    deep = "[" * 100_000 + "]" * 100_000
    apiserver.add_node("deep", annotations={"example.com/fpga-slots": deep, "example.com/fpga-bitstreams": "{}"})
    apiserver.add_node("fpga-1", annotations=published(None))
    async with watching(api_client) as (cache, heard):
        assert await heard.next() == ("LIST", "deep,fpga-1")
        assert cache.synced
        assert cache.nodes.get("deep") is None
        await apiserver.until(lambda: apiserver.active_watches("nodes") == 1)

        apiserver.add_node("fpga-1", annotations=published("aes"))  # the other nodes' changes still arrive
        assert await heard.next() == ("MODIFIED", "fpga-1")
        assert dict(cache.nodes.get("fpga-1").free_loaded) == {("aes", "pac_a10"): 1}  # type: ignore[union-attr]
        apiserver.add_node("deep", annotations={"example.com/fpga-slots": deep, "example.com/fpga-bitstreams": "{}"})
        assert await heard.next() == ("MODIFIED", "deep")
    assert len(apiserver.list_requests("nodes")) == 1  # no relist
    assert [r.getMessage() for r in caplog.records if "nested 100000 levels deep" in r.getMessage()]


async def test_watch_adds_updates_and_removes(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    async with watching(api_client) as (cache, heard):
        assert await heard.next() == ("LIST", "")
        await apiserver.until(lambda: apiserver.active_watches("nodes") == 1)

        apiserver.add_node("n1", annotations=published(None))
        assert await heard.next() == ("ADDED", "n1")
        assert dict(cache.nodes.get("n1").free_empty) == {"pac_a10": 1}  # type: ignore[union-attr]

        apiserver.add_node("n1", annotations=published("sha"))
        assert await heard.next() == ("MODIFIED", "n1")
        assert dict(cache.nodes.get("n1").free_loaded) == {("sha", "pac_a10"): 1}  # type: ignore[union-attr]

        apiserver.add_node("n1")  # the agent's annotations gone
        assert await heard.next() == ("MODIFIED", "n1")
        assert cache.nodes.get("n1") is None

        apiserver.add_node("n1", annotations=published("aes"))
        assert await heard.next() == ("MODIFIED", "n1")
        apiserver.delete_node("n1")
        assert await heard.next() == ("DELETED", "n1")
        assert cache.nodes.get("n1") is None
    assert len(apiserver.list_requests("nodes")) == 1


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
    apiserver.add_node("n1", annotations=published("aes"))
    async with watching(api_client) as (cache, heard):
        assert await heard.next() == ("LIST", "n1")
        await apiserver.until(lambda: apiserver.active_watches("nodes") == 1)

        apiserver.compact()
        interrupt(apiserver, "nodes")  # type: ignore[operator]
        apiserver.delete_node("n1")
        apiserver.add_node("n2", annotations=published(None))

        # The relist may come before or after the changes: either way the cache ends up right.
        await heard.until(lambda c: c.nodes.get("n1") is None and c.nodes.get("n2") is not None)
        await apiserver.until(lambda: len(apiserver.list_requests("nodes")) >= 2)
        assert cache.synced


async def test_handlers_never_call_the_api_server(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    for i in range(5):
        apiserver.add_node(f"n{i}", annotations=published("aes" if i % 2 else None))
    async with watching(api_client) as (cache, heard), ExtenderUnderTest() as extender:
        extender.extender.table = cache
        assert (await heard.next())[0] == "LIST"
        await apiserver.until(lambda: apiserver.active_watches("nodes") == 1)
        before = len(apiserver.requests())

        names = [f"n{i}" for i in range(5)] + ["not-a-node"]  # a name no node has: left out (the floor)
        calls = [extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": names}) for _ in range(30)]
        calls += [extender.post("/filter", {"Pod": pod("aes"), "NodeNames": names}) for _ in range(30)]
        answers = await asyncio.gather(*calls)
        assert await extender.get("/healthz") == (200, "ok\n")

        assert len(apiserver.requests()) == before
        assert answers[0][0] == 200
        assert settled(ranking(answers[0][1], names), [0, 3, 0, 3, 0, 0])  # 7, 10, 7, 10, 7 shifted

        apiserver.add_node("n0", annotations=published("aes"))
        assert await heard.next() == ("MODIFIED", "n0")
        _, answer = await extender.post("/prioritize", {"Pod": pod("aes"), "NodeNames": names})
        assert settled(ranking(answer, names), [3, 3, 0, 3, 0, 0])

"""FpgaBitstream objects through the real kubernetes client and the fake API server: list, watch, relist."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from agent.bitstreams.declaration import Declaration, parse_declaration
from agent.errors import CatalogError
from agent.kube.reflector import Backoff, Watcher, WatchEventKind
from tests.fakeapi import FakeKubeApiServer

pytestmark = pytest.mark.usefixtures("no_leaked_tasks", "no_leaked_threads")

FAST_BACKOFF = Backoff(initial_s=0.01, max_s=0.05)
TIMEOUT_S = 10.0
PATH = "/apis/example.com/v1alpha1/fpgabitstreams"


def bitstream(name: str, sha: str = "ab", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "platform": "p",
            "acceleratorId": "a",
            "sha256": sha * 32,
            "size": 10,
            "source": {"oci": f"localhost:5000/fpga/{name}:1"},
            **spec,
        },
    }


def parse(obj: Mapping[str, Any]) -> Declaration:
    """As the agent parses them: a declaration that does not parse is skipped (and logged)."""
    try:
        return parse_declaration(dict(obj))
    except CatalogError as exc:
        raise ValueError(str(exc)) from None


class Heard:
    def __init__(self) -> None:
        self.declared: dict[str, Declaration] = {}
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.errors: list[str] = []

    def replace(self, values: list[Declaration]) -> None:
        self.declared = {d.name: d for d in values}
        self.queue.put_nowait(("LIST", ",".join(sorted(self.declared))))

    def event(self, kind: WatchEventKind, value: Declaration) -> None:
        if kind == "DELETED":
            self.declared.pop(value.name, None)
        else:
            self.declared[value.name] = value
        self.queue.put_nowait((kind, value.name))

    async def next(self) -> tuple[str, str]:
        async with asyncio.timeout(TIMEOUT_S):
            return await self.queue.get()


@contextlib.asynccontextmanager
async def watching(api_client: client.ApiClient) -> AsyncIterator[Heard]:
    heard = Heard()
    watcher = Watcher(
        api_client,
        "fpgabitstreams",
        parse=parse,
        on_replace=heard.replace,
        on_event=heard.event,
        on_error=heard.errors.append,
        backoff=FAST_BACKOFF,
    )
    task = asyncio.create_task(watcher.run(), name="bitstream-watch-under-test")
    try:
        yield heard
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_declarations_are_listed_then_watched(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    apiserver.put_fpga_bitstream(bitstream("nlb"))
    apiserver.put_fpga_bitstream(bitstream("Bad-Name"))  # the API server would refuse it; the agent skips it
    async with watching(api_client) as heard:
        assert await heard.next() == ("LIST", "nlb")
        apiserver.put_fpga_bitstream(bitstream("aes"))
        assert await heard.next() == ("ADDED", "aes")
        apiserver.put_fpga_bitstream(bitstream("nlb", sha="cd"))
        assert await heard.next() == ("MODIFIED", "nlb")
        assert heard.declared["nlb"].sha256 == "cd" * 32
        apiserver.delete_fpga_bitstream("aes")
        assert await heard.next() == ("DELETED", "aes")
        assert sorted(heard.declared) == ["nlb"]
    assert apiserver.list_requests("fpgabitstreams")
    assert apiserver.watch_requests("fpgabitstreams")
    assert apiserver.requests(path=PATH) == apiserver.requests("GET", PATH)


async def test_an_expired_watch_lists_again(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    apiserver.put_fpga_bitstream(bitstream("nlb"))
    async with watching(api_client) as heard:
        assert await heard.next() == ("LIST", "nlb")
        await apiserver.until(lambda: apiserver.active_watches("fpgabitstreams") == 1)
        apiserver.delete_fpga_bitstream("nlb")
        apiserver.compact()
        apiserver.expire_watches("fpgabitstreams")
        while (found := await heard.next()) != ("LIST", ""):
            assert found == ("DELETED", "nlb")
        assert heard.declared == {}


async def test_a_failing_list_is_reported_and_retried(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.fail_next(
        "GET", PATH, 404, times=2, watch=False, message="the server could not find the requested resource"
    )
    apiserver.put_fpga_bitstream(bitstream("nlb"))
    async with watching(api_client) as heard:
        assert await heard.next() == ("LIST", "nlb")
    assert len(heard.errors) == 2
    assert "listing FpgaBitstream objects failed" in heard.errors[0]

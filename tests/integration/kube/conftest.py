"""A running pod cache over the fake API server (the server, kubeconfig and ApiClient come from tests/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes import client

from agent.kube.pods import PodCache, PodInfo
from agent.kube.reflector import Backoff, WatchEventKind
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer

#: Short backoff so that recovery paths run quickly; the logic is the same.
FAST_BACKOFF = Backoff(initial_s=0.01, max_s=0.05)
TIMEOUT_S = 10.0


class Seen:
    """A pod listener that queues what it hears, for tests to wait on."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[WatchEventKind, PodInfo]] = asyncio.Queue()
        self.all: list[tuple[WatchEventKind, str]] = []

    def __call__(self, kind: WatchEventKind, pod: PodInfo) -> None:
        self.all.append((kind, pod.name))
        self.queue.put_nowait((kind, pod))

    async def next(self, timeout_s: float = TIMEOUT_S) -> tuple[WatchEventKind, PodInfo]:
        async with asyncio.timeout(timeout_s):
            return await self.queue.get()

    async def take(self, count: int, timeout_s: float = TIMEOUT_S) -> list[tuple[WatchEventKind, str]]:
        """The next ``count`` changes as (kind, pod name), in order."""
        return [(kind, pod.name) for kind, pod in [await self.next(timeout_s) for _ in range(count)]]

    def pending(self) -> int:
        return self.queue.qsize()


@contextlib.asynccontextmanager
async def running_cache(
    api_client: client.ApiClient, node: str = DEFAULT_NODE, **kwargs: Any
) -> AsyncIterator[tuple[PodCache, Seen, asyncio.Task[None]]]:
    """A PodCache running as a task, with a listener; cancelled (and its thread ended) afterwards."""
    kwargs.setdefault("backoff", FAST_BACKOFF)
    cache = PodCache(api_client, node, **kwargs)
    seen = Seen()
    cache.add_listener(seen)
    task = asyncio.create_task(cache.run(), name="pod-cache-under-test")
    try:
        yield cache, seen, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def start_cache(api_client: client.ApiClient) -> Callable[..., Any]:
    """``async with start_cache(node=..., backoff=...) as (cache, seen, task):``."""

    def start(**kwargs: Any) -> Any:
        return running_cache(api_client, **kwargs)

    return start


@pytest.fixture
async def synced_cache(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> AsyncIterator[tuple[PodCache, Seen]]:
    """A running, synced cache of node-a whose watch is open at the server."""
    async with running_cache(api_client) as (cache, seen, _task):
        await apiserver.until(lambda: apiserver.active_watches() == 1)  # opened once the list was handed over
        assert cache.synced
        yield cache, seen


@pytest.fixture(autouse=True)
def _threads_checked(no_leaked_threads: None) -> None:
    """Every kube test checks that its threads ended."""

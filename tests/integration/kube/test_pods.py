"""PodCache over real HTTP: the real kubernetes client against the fake API server through a kubeconfig."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from agent.kube.pods import PodCache, PodInfo
from agent.kube.reflector import WatchEventKind
from tests.fakeapi import FakeKubeApiServer
from tests.integration.kube.conftest import TIMEOUT_S, Seen

NS = "default"


async def test_initial_list_holds_only_this_nodes_pods(
    apiserver: FakeKubeApiServer, start_cache: Callable[..., Any]
) -> None:
    apiserver.add_pod("mine-1", annotations={"example.com/fpga-bitstream": "aes"})
    apiserver.add_pod("mine-2", namespace="ml", slots={"main": 2, "sidecar": 0})
    apiserver.add_pod("elsewhere", node="node-b")
    apiserver.add_pod("unscheduled", node=None)

    async with start_cache() as (cache, seen, _task):
        assert not cache.synced
        await apiserver.until(lambda: apiserver.active_watches() == 1)  # opened once the list was handed over

        assert cache.synced
        assert sorted(p.name for p in cache.pods()) == ["mine-1", "mine-2"]
        assert sorted(await seen.take(2)) == [("ADDED", "mine-1"), ("ADDED", "mine-2")]
        mine = cache.get(NS, "mine-1")
        assert mine is not None
        assert mine.annotations == {"example.com/fpga-bitstream": "aes"}
        assert mine.node_name == "node-a"
        ml = cache.get("ml", "mine-2")
        assert ml is not None
        assert dict(ml.containers) == {"main": 2, "sidecar": 0}
        assert cache.get(NS, "elsewhere") is None

    first_list = apiserver.list_requests()[0]
    assert first_list.query["fieldSelector"] == "spec.nodeName=node-a"
    assert first_list.query["resourceVersion"] == "0"  # served from the watch cache
    assert first_list.headers["authorization"] == f"Bearer {apiserver.token}"


async def test_watch_starts_at_the_lists_resource_version(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    listed_at = apiserver.list_requests()
    watch = apiserver.watch_requests()[0]
    assert len(listed_at) == 1
    assert watch.query["resourceVersion"] == str(apiserver.resource_version)
    assert watch.query["fieldSelector"] == "spec.nodeName=node-a"
    assert watch.query["allowWatchBookmarks"] == "true"
    assert int(watch.query["timeoutSeconds"]) > 0


def _add(api: FakeKubeApiServer) -> None:
    api.add_pod("p2", annotations={"example.com/fpga-bitstream": "sha3"})


def _annotate(api: FakeKubeApiServer) -> None:
    api.modify_pod(NS, "p1", annotations={"example.com/fpga-bitstream.main": "crc"})


def _run(api: FakeKubeApiServer) -> None:
    api.modify_pod(NS, "p1", phase="Running")


def _delete(api: FakeKubeApiServer) -> None:
    api.delete_pod(NS, "p1")


def _bind(api: FakeKubeApiServer) -> None:
    api.add_pod("p2", node=None)
    api.modify_pod(NS, "p2", node="node-a")


def _bind_elsewhere(api: FakeKubeApiServer) -> None:
    api.add_pod("p2", node=None)
    api.modify_pod(NS, "p2", node="node-b")
    api.add_pod("p3")  # a marker: nothing about p2 came before it


@pytest.mark.parametrize(
    ("change", "expected", "check"),
    [
        pytest.param(_add, ("ADDED", "p2"), lambda c: c.get(NS, "p2").annotations, id="added"),
        pytest.param(
            _annotate,
            ("MODIFIED", "p1"),
            lambda c: c.get(NS, "p1").annotations == {"example.com/fpga-bitstream.main": "crc"},
            id="annotation-modified",
        ),
        pytest.param(_run, ("MODIFIED", "p1"), lambda c: c.get(NS, "p1").phase == "Running", id="phase-modified"),
        pytest.param(_delete, ("DELETED", "p1"), lambda c: c.get(NS, "p1") is None, id="deleted"),
        pytest.param(_bind, ("ADDED", "p2"), lambda c: c.get(NS, "p2") is not None, id="bound-to-this-node"),
        pytest.param(_bind_elsewhere, ("ADDED", "p3"), lambda c: c.get(NS, "p2") is None, id="bound-elsewhere"),
    ],
)
async def test_watch_delivers_changes_to_the_cache_and_listeners(
    apiserver: FakeKubeApiServer,
    start_cache: Callable[..., Any],
    change: Callable[[FakeKubeApiServer], None],
    expected: tuple[WatchEventKind, str],
    check: Callable[[PodCache], bool],
) -> None:
    apiserver.add_pod("p1")
    async with start_cache() as (cache, seen, _task):
        assert await seen.take(1) == [("ADDED", "p1")]
        await apiserver.until(lambda: apiserver.active_watches() == 1)

        change(apiserver)

        kind, pod = await seen.next()
        assert (kind, pod.name) == expected
        assert check(cache)
        assert pod.deleted is (kind == "DELETED")
    assert len(apiserver.list_requests()) == 1  # all through the watch


async def test_updates_that_change_nothing_kept_are_not_passed_on(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    _cache, seen = synced_cache
    apiserver.add_pod("p1")
    assert await seen.take(1) == [("ADDED", "p1")]

    apiserver.touch_pod(NS, "p1")  # a status condition, a new resourceVersion
    apiserver.touch_pod(NS, "p1")
    apiserver.modify_pod(NS, "p1", phase="Running")

    assert await seen.take(1) == [("MODIFIED", "p1")]
    assert seen.pending() == 0


async def test_a_pod_recreated_under_the_same_name_is_a_new_pod(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    cache, seen = synced_cache
    first = apiserver.add_pod("p1")
    apiserver.delete_pod(NS, "p1")
    second = apiserver.add_pod("p1")

    changes = [await seen.next() for _ in range(3)]
    assert [(k, p.uid) for k, p in changes] == [
        ("ADDED", first["metadata"]["uid"]),
        ("DELETED", first["metadata"]["uid"]),
        ("ADDED", second["metadata"]["uid"]),
    ]
    pod = cache.get(NS, "p1")
    assert pod is not None
    assert pod.uid == second["metadata"]["uid"]


def _expire_open_watch(api: FakeKubeApiServer) -> None:
    """The server sends an ERROR event with a 410 Status on the open watch."""
    api.expire_watches()


def _compact_then_end(api: FakeKubeApiServer) -> None:
    """History is compacted, the watch ends (timeout); resuming from the old version gets 410."""
    api.add_node("unrelated")  # moves the store on, so the cache's version is now too old
    api.compact()
    api.end_watches()


@pytest.mark.parametrize(
    "expire",
    [
        pytest.param(_expire_open_watch, id="error-event-on-open-watch"),
        pytest.param(_compact_then_end, id="resume-from-compacted-version"),
    ],
)
async def test_410_gone_leads_to_a_relist_that_does_not_go_back_in_time(
    apiserver: FakeKubeApiServer,
    synced_cache: tuple[PodCache, Seen],
    expire: Callable[[FakeKubeApiServer], None],
) -> None:
    cache, seen = synced_cache
    apiserver.add_pod("before")
    assert await seen.take(1) == [("ADDED", "before")]
    seen_at = apiserver.resource_version

    expire(apiserver)
    await apiserver.until(lambda: len(apiserver.list_requests()) == 2)
    apiserver.add_pod("after")

    assert await seen.take(1) == [("ADDED", "after")]
    relist = apiserver.list_requests()[1]
    assert relist.query["resourceVersion"] == str(seen_at)
    assert relist.query["resourceVersionMatch"] == "NotOlderThan"
    assert sorted(p.name for p in cache.pods()) == ["after", "before"]


async def test_a_dropped_watch_is_followed_by_a_relist_and_a_new_watch(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    cache, seen = synced_cache
    apiserver.add_pod("p1")
    apiserver.add_pod("p2")
    assert sorted(await seen.take(2)) == [("ADDED", "p1"), ("ADDED", "p2")]

    # Keep the relist failing until the changes are made: they happen while no watch is open,
    # so the deletion can only be found by comparing the relist with the cache.
    apiserver.fail_next("GET", "/api/v1/pods", 503, times=1000, watch=False)
    assert apiserver.drop_watches() == 1
    apiserver.delete_pod(NS, "p1")
    apiserver.modify_pod(NS, "p2", annotations={"example.com/fpga-bitstream": "new"})
    await apiserver.until(lambda: len(apiserver.list_requests()) >= 2)
    assert sorted(p.name for p in cache.pods()) == ["p1", "p2"]  # stale until a list succeeds
    apiserver.clear_faults()

    assert sorted(await seen.take(2)) == [("DELETED", "p1"), ("MODIFIED", "p2")]
    await apiserver.until(lambda: apiserver.active_watches() == 1)
    apiserver.add_pod("p3")
    assert await seen.take(1) == [("ADDED", "p3")]
    assert len(apiserver.watch_requests()) == 2
    assert sorted(p.name for p in cache.pods()) == ["p2", "p3"]


async def test_a_pod_replaced_while_the_watch_was_down_is_deleted_then_added(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    _cache, seen = synced_cache
    old = apiserver.add_pod("p1")
    assert await seen.take(1) == [("ADDED", "p1")]

    apiserver.fail_next("GET", "/api/v1/pods", 503, times=1000, watch=False)
    apiserver.drop_watches()
    apiserver.delete_pod(NS, "p1")
    new = apiserver.add_pod("p1")
    await apiserver.until(lambda: len(apiserver.list_requests()) >= 2)
    apiserver.clear_faults()

    changes = [await seen.next() for _ in range(2)]
    assert [(k, p.uid) for k, p in changes] == [("DELETED", old["metadata"]["uid"]), ("ADDED", new["metadata"]["uid"])]


async def test_a_watch_ended_by_the_server_resumes_without_a_list(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    _cache, seen = synced_cache
    apiserver.add_pod("p1")
    assert await seen.take(1) == [("ADDED", "p1")]
    last = apiserver.resource_version

    apiserver.end_watches()
    await apiserver.until(lambda: len(apiserver.watch_requests()) == 2)
    apiserver.add_pod("p2")

    assert await seen.take(1) == [("ADDED", "p2")]
    assert apiserver.watch_requests()[1].query["resourceVersion"] == str(last)
    assert len(apiserver.list_requests()) == 1


async def test_bookmarks_move_the_resource_version_on(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    apiserver.add_node("n1")  # other kinds move the store's version on, not the pod watch
    marked = apiserver.bookmark()
    apiserver.end_watches()

    # Whether the cache resumes the watch or lists again, it asks from the bookmark on.
    await apiserver.until(lambda: len(apiserver.requests("GET")) == 3)
    assert apiserver.requests("GET")[2].query["resourceVersion"] == str(marked)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        pytest.param(500, "HTTP 500", id="internal-error"),
        pytest.param(503, "HTTP 503", id="unavailable"),
        pytest.param(429, "HTTP 429", id="throttled"),
        pytest.param(403, "HTTP 403", id="forbidden-rbac"),
    ],
)
async def test_a_failing_list_is_retried_with_backoff_and_logged_once(
    apiserver: FakeKubeApiServer,
    start_cache: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    code: int,
    kind: str,
) -> None:
    caplog.set_level(logging.DEBUG, "agent.kube")
    apiserver.add_pod("p1")
    apiserver.fail_next("GET", "/api/v1/pods", code, times=1000, watch=False, message="nope")

    async with start_cache() as (cache, seen, _task):
        await apiserver.until(lambda: len(apiserver.list_requests()) >= 3)
        assert not cache.synced
        apiserver.clear_faults()
        assert await seen.take(1) == [("ADDED", "p1")]
        assert cache.synced

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "listing pods" in r.getMessage()]
    assert len(warnings) == 1
    assert kind in warnings[0].getMessage()
    assert any("works again" in r.getMessage() for r in caplog.records)


async def test_a_failing_watch_leads_to_a_relist(apiserver: FakeKubeApiServer, start_cache: Callable[..., Any]) -> None:
    apiserver.fail_next("GET", "/api/v1/pods", 500, watch=True)
    async with start_cache() as (_cache, seen, _task):
        await apiserver.until(lambda: apiserver.active_watches() == 1)
        apiserver.add_pod("p1")
        assert await seen.take(1) == [("ADDED", "p1")]
    assert len(apiserver.list_requests()) == 2


async def test_wrong_credentials_are_reported_and_nothing_is_synced(
    apiserver: FakeKubeApiServer, start_cache: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.token = "rotated"
    async with start_cache() as (cache, _seen, _task):
        await apiserver.until(lambda: len(apiserver.list_requests()) >= 2)
        assert not cache.synced
    assert any("listing pods" in r.getMessage() and "HTTP 401" in r.getMessage() for r in caplog.records)


async def test_wait_pod_returns_a_pod_that_arrives_later(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    cache, _seen = synced_cache
    waiting = asyncio.create_task(cache.wait_pod(NS, "late", TIMEOUT_S))
    await asyncio.sleep(0)  # let it register (ordering only, not timing)
    assert not waiting.done()
    apiserver.add_pod("late")
    pod = await waiting
    assert pod is not None
    assert pod.name == "late"
    assert await cache.wait_pod(NS, "late", 0) is pod


async def test_wait_pod_gives_up_with_none(synced_cache: tuple[PodCache, Seen]) -> None:
    cache, _seen = synced_cache
    assert await cache.wait_pod(NS, "never", 0.01) is None


async def test_a_failing_listener_does_not_stop_the_others(
    apiserver: FakeKubeApiServer, start_cache: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    def broken(kind: WatchEventKind, pod: PodInfo) -> None:
        raise RuntimeError("listener bug")

    async with start_cache() as (cache, seen, _task):
        cache.remove_listener(seen)
        cache.add_listener(broken)
        cache.add_listener(seen)
        apiserver.add_pod("p1")
        apiserver.add_pod("p2")
        assert sorted(await seen.take(2)) == [("ADDED", "p1"), ("ADDED", "p2")]
    assert sum("pod listener failed" in r.getMessage() for r in caplog.records) == 2


async def test_removed_listener_hears_nothing_more(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen]
) -> None:
    cache, seen = synced_cache
    other = Seen()
    cache.add_listener(other)
    apiserver.add_pod("p1")
    assert await other.take(1) == [("ADDED", "p1")]
    cache.remove_listener(other)
    apiserver.add_pod("p2")
    assert await seen.take(2) == [("ADDED", "p1"), ("ADDED", "p2")]
    assert other.pending() == 0


def _watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kube-watch-")]


@pytest.mark.parametrize(
    "state",
    [
        pytest.param("watching", id="while-watching"),
        pytest.param("backing-off", id="while-backing-off"),
    ],
)
async def test_cancel_ends_the_watch_and_the_thread(
    apiserver: FakeKubeApiServer, start_cache: Callable[..., Any], state: str
) -> None:
    if state == "backing-off":
        apiserver.fail_next("GET", "/api/v1/pods", 500, times=1000)
    async with start_cache() as (_cache, _seen, task):
        if state == "watching":
            await apiserver.until(lambda: apiserver.active_watches() == 1)
        else:
            await apiserver.until(lambda: len(apiserver.list_requests()) >= 2)
        assert len(_watch_threads()) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert _watch_threads() == []
    await apiserver.until(lambda: apiserver.active_watches() == 0)
    apiserver.clear_faults()


async def test_the_cache_can_run_again_after_a_cancel(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_pod("p1")
    cache = PodCache(api_client, "node-a")
    for _ in range(2):
        task = asyncio.create_task(cache.run())
        await apiserver.until(lambda: apiserver.active_watches() == 1)
        assert cache.synced
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await apiserver.until(lambda: apiserver.active_watches() == 0)
    assert [p.name for p in cache.pods()] == ["p1"]
    assert len(apiserver.list_requests()) == 2


@pytest.mark.parametrize(
    ("code", "consistent"),
    [
        pytest.param(410, True, id="expired-version"),
        pytest.param(504, True, id="too-large-version"),
        pytest.param(500, False, id="other-error"),
    ],
)
async def test_a_relist_refused_for_its_version_is_followed_by_a_consistent_read(
    apiserver: FakeKubeApiServer, synced_cache: tuple[PodCache, Seen], code: int, consistent: bool
) -> None:
    _cache, seen = synced_cache
    apiserver.add_pod("p1")
    assert await seen.take(1) == [("ADDED", "p1")]
    apiserver.fail_next("GET", "/api/v1/pods", code, watch=False)

    apiserver.drop_watches()
    await apiserver.until(lambda: apiserver.active_watches() == 1)

    first_relist, second_relist = apiserver.list_requests()[1:3]
    assert first_relist.query["resourceVersionMatch"] == "NotOlderThan"
    if consistent:
        assert "resourceVersion" not in second_relist.query
        assert "resourceVersionMatch" not in second_relist.query
    else:
        assert second_relist.query == first_relist.query

"""A real extender server on 127.0.0.1 (a free port), a client session, and request builders.

``ExtenderUnderTest`` serves the real aiohttp app over TCP; tests talk to it with
aiohttp's client, as kube-scheduler would (keep-alive, JSON bodies). Pods start from
the pod kube-scheduler v1.36 actually sent (``tests/wire-samples``), nodes are built
as the fake API server builds them, their state as the FpgaNodeState the agent publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest
import uvloop

from agent.extender.nodestate import WatchedNode, read_published_state
from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights
from agent.extender.server import Extender, bound_port, build_app, extender_metrics, start
from agent.extender.table import StateTable
from tests.fakeapi import FakeKubeApiServer, make_node
from tests.unit.extender.factories import CATALOG, PAC, state_object_of

SAMPLES = Path(__file__).parents[2] / "wire-samples"
#: The clock the scoring sees (last_used values in tests are relative to it).
NOW = 1_800_000_000
Mode = Literal["names", "nodes"]
MODES = [pytest.param("names", id="nodeCacheCapable"), pytest.param("nodes", id="full-nodes")]

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], Any]]:
    """Every async test here runs on each event loop the extender serves on (``--event-loop``): uvloop's, the
    default, and asyncio's own."""
    return {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


def sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


def pod(bitstream: str | None = None, slots: int = 1, **more_annotations: str) -> dict[str, Any]:
    """The pod kube-scheduler sent, asking for ``slots`` slots and (if given) a bitstream."""
    result: dict[str, Any] = copy.deepcopy(sample("extender-filter-request.json")["Pod"])
    notes: dict[str, str] = dict(more_annotations)
    if bitstream is not None:
        notes["example.com/fpga-bitstream"] = bitstream
    result["metadata"]["annotations"] = notes
    resources = result["spec"]["containers"][0]["resources"]
    resources["limits"]["example.com/fpga-slot"] = str(slots)
    resources["requests"]["example.com/fpga-slot"] = str(slots)
    return result


@dataclass
class Cluster:
    """Nodes by name: their published slots (None: nothing published), as one test sees them."""

    slots: dict[str, Sequence[Mapping[str, Any]] | None] = field(default_factory=dict)
    bitstreams: dict[str, Mapping[str, str] | None] = field(default_factory=dict)
    #: Node name -> the ``spec`` of its FpgaNodeState as written, however malformed.
    raw_specs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(
        self, name: str, slots: Sequence[Mapping[str, Any]] | None, bitstreams: Mapping[str, str] | None = None
    ) -> None:
        self.slots[name] = slots
        self.bitstreams[name] = bitstreams

    def node_object(self, name: str) -> dict[str, Any]:
        node = make_node(name)
        node["metadata"]["resourceVersion"] = "1"
        return node

    def state_object(self, name: str) -> dict[str, Any] | None:
        """The node's FpgaNodeState; None when it publishes none."""
        if name in self.raw_specs:
            obj = state_object_of(name, [])
            obj["spec"] = self.raw_specs[name]
            return obj
        published = self.slots.get(name)
        return None if published is None else state_object_of(name, published, self.bitstreams.get(name))

    def watched(self) -> list[WatchedNode]:
        """What the extender's watch lists: every FpgaNodeState (a node without one is not in the list)."""
        objects = (self.state_object(name) for name in {*self.slots, *self.raw_specs})
        return [read_published_state(obj) for obj in objects if obj is not None]


def ranking(answer: list[dict[str, Any]], names: Sequence[str]) -> list[int]:
    """Each name's score as kube-scheduler adds it up from a prioritize answer: a name left out scores 0."""
    given = {entry["Host"]: entry["Score"] for entry in answer}
    assert len(given) == len(answer), answer  # no name twice
    assert set(given) <= set(names), answer
    assert 0 not in given.values(), answer  # the floor is left out, not listed
    return [given.get(name, 0) for name in names]


def shifted(scores: Sequence[int]) -> list[int]:
    """Scores with the lowest at 0: the same ranking, as the extender answers it."""
    floor = min(scores)
    return [score - floor for score in scores]


def settled(got: Sequence[int], expected: Sequence[int]) -> bool:
    """``got`` is ``expected`` (the shifted per-name scores) as a one-slot pod's answer settles it
    (``agent.extender.promises``): of several nodes at the top score one keeps it, the others are one lower."""
    top = max(expected, default=0)
    at_top = [i for i, score in enumerate(expected) if score == top]
    if len(at_top) <= 1 or top == 0:
        return list(got) == list(expected)
    kept = [i for i in at_top if got[i] == top]
    lowered = [score - 1 if score == top and i not in kept else score for i, score in enumerate(expected)]
    return len(kept) == 1 and list(got) == lowered


def extender_args(the_pod: Mapping[str, Any], names: Sequence[str], mode: Mode, cluster: Cluster) -> dict[str, Any]:
    """ExtenderArgs as kube-scheduler marshals them for either nodeCacheCapable setting."""
    if mode == "names":
        return {"Pod": the_pod, "Nodes": None, "NodeNames": list(names)}
    return {
        "Pod": the_pod,
        "Nodes": {"metadata": {}, "items": [cluster.node_object(n) for n in names]},
        "NodeNames": None,
    }


class ExtenderUnderTest:
    """The extender app served over real TCP, with its node cache and a client session."""

    def __init__(
        self,
        weights: ScoreWeights | None = None,
        *,
        max_body_bytes: int | None = None,
        answer_limit: int = ANSWER_LIMIT,
    ) -> None:
        self.cache = StateTable()
        self.extender = Extender(self.cache, weights or ScoreWeights(), clock=lambda: NOW, answer_limit=answer_limit)
        kwargs = {} if max_body_bytes is None else {"max_body_bytes": max_body_bytes}
        self.metrics = extender_metrics()
        self.app = build_app(self.extender, metrics=self.metrics, **kwargs)
        self.runner: aiohttp.web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        assert self.runner is not None
        return f"http://127.0.0.1:{bound_port(self.runner)}"

    async def __aenter__(self) -> ExtenderUnderTest:
        self.runner = await start(self.app, "127.0.0.1", 0)
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()
        if self.runner is not None:
            await self.runner.cleanup()

    def publish(self, cluster: Cluster) -> None:
        """The state table after a list of these nodes."""
        self.cache.replace_watched(cluster.watched())

    async def post(self, path: str, payload: object) -> tuple[int, Any]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return await self.post_raw(path, data)

    async def post_raw(self, path: str, data: bytes, **kwargs: Any) -> tuple[int, Any]:
        assert self.session is not None
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.url + path, data=data, headers=headers, **kwargs) as response:
            assert response.content_type == "application/json"
            return response.status, json.loads(await response.read())

    async def get(self, path: str) -> tuple[int, str]:
        assert self.session is not None
        async with self.session.get(self.url + path) as response:
            return response.status, await response.text()


@pytest.fixture
async def extender() -> AsyncIterator[ExtenderUnderTest]:
    async with ExtenderUnderTest() as running:
        yield running


@contextlib.contextmanager
def extender_in_thread(cache: StateTable | None = None) -> Iterator[str]:
    """The extender on its own event loop in a thread, for synchronous clients (hypothesis); yields the URL."""
    ready = threading.Event()
    url: list[str] = []
    stop_box: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
    failure: list[BaseException] = []

    async def main() -> None:
        stop = asyncio.Event()
        stop_box.append((asyncio.get_running_loop(), stop))
        runner = await start(
            build_app(Extender(cache or StateTable(), ScoreWeights(), clock=lambda: NOW)), "127.0.0.1", 0
        )
        try:
            url.append(f"http://127.0.0.1:{bound_port(runner)}")
            ready.set()
            await stop.wait()
        finally:
            await runner.cleanup()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            failure.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="extender-under-test")
    thread.start()
    try:
        assert ready.wait(10.0), "the extender did not start"
        assert not failure, failure
        yield url[0]
    finally:
        if stop_box:
            loop, stop = stop_box[0]
            loop.call_soon_threadsafe(stop.set)
        thread.join(10.0)
        assert not thread.is_alive(), "the extender thread did not stop"


PROCESS_TIMEOUT_S = 60.0
LISTENING = re.compile(r"scheduler extender listening on 127\.0\.0\.1:(\d+)")


def extender_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("KUBERNETES_SERVICE_PORT", None)
    env["FPGA_AGENT_LOG_LEVEL"] = "info"
    return env


class ExtenderProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.log: list[str] = []

    async def wait_for_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first log line that matches, read so far or still to come (the process says when it listens
        and when its node cache synced, in either order: the watch and the server start together)."""
        assert self.process.stderr is not None
        for line in self.log:
            if found := pattern.search(line):
                return found
        async with asyncio.timeout(PROCESS_TIMEOUT_S):
            while True:
                raw = await self.process.stderr.readline()
                assert raw, f"the extender exited early: {self.log}"
                line = raw.decode()
                self.log.append(line)
                found = pattern.search(line)
                if found:
                    return found


@contextlib.asynccontextmanager
async def running_extender(*args: str, env: Mapping[str, str] | None = None) -> AsyncIterator[ExtenderProcess]:
    """``fpga-agent <args>`` as a child process (its log read through :class:`ExtenderProcess`), killed on the
    way out if it is still running."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent.cli.main", *args,
        env=dict(env) if env is not None else extender_env(),
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield ExtenderProcess(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


#: An FpgaBitstream of the ``PAC`` platform without a name (tests add ``metadata``).
FPGA_BITSTREAM = {
    "apiVersion": "example.com/v1alpha1",
    "kind": "FpgaBitstream",
    "spec": {
        "platform": PAC,
        "acceleratorId": "0123456789abcdef0123456789abcdef",
        "sha256": "ab" * 32,
        "size": 4096,
        "source": {"oci": "registry.example.com/fpga/new:1"},
    },
}


def publish_state(
    api: FakeKubeApiServer, node: str, slots: Sequence[Mapping[str, Any]], bitstreams: Mapping[str, str] | None = None
) -> None:
    """``node``'s FpgaNodeState as its agent writes it: the factories' slot records, the catalog (default CATALOG)."""
    wire = [{**{k: v for k, v in r.items() if k != "last_used"}, "lastUsed": r.get("last_used")} for r in slots]
    spec = {"nodeName": node, "slots": wire, "bitstreams": dict(CATALOG if bitstreams is None else bitstreams)}
    created = "2026-12-06T00:00:00Z"
    metadata = {"name": node, "namespace": "fpga-slot", "uid": f"uid-{node}", "creationTimestamp": created}
    api.put_node_state({"metadata": metadata, "spec": spec})

"""This node's slot state on its Node object, and the slot state of every node for the cluster view.

The scheduler extender and ``fpga-agent cluster`` read what the agent writes on its
own Node (the wire contract; the extender reads exactly this):

* annotation ``example.com/fpga-slots``: compact JSON list, one object per slot;
* annotation ``example.com/fpga-bitstreams``: compact JSON object, catalog name -> platform;
* annotation ``example.com/fpga-agent-heartbeat``: epoch seconds, renewed every
  ``HEARTBEAT_S``: readers take a state whose heartbeat is older than ``STALE_AFTER_S``
  for the state of an agent that is gone (killed, or uninstalled without its clean stop);
* label ``example.com/fpga-platform=<platform>`` when all slots share one platform, and
  ``fpga-platform.example.com/<platform>: "true"`` for every platform, so that the
  scheduler's own NodeAffinity filter can check platform fit without calling anyone.

The agent owns exactly these keys (the three annotations, the one label and every label
under the ``fpga-platform.example.com/`` prefix) and never touches the node's other
labels and annotations: every write is a JSON merge patch of the owned keys that
changed, a removed platform's label being ``null`` in the patch.

:class:`NodePublisher` is how the agent writes. The slot table changes in bursts
(Allocate, PreStartContainer, programming, release follow each other within
milliseconds), and every Node write is sent to every watcher of Nodes in the
cluster, so the publisher keeps only the latest desired state, patches only when
it differs from what the Node shows, at most about twice a second (later changes
are folded into the next patch), and retries failures with backoff. The device
plugin only calls :meth:`NodePublisher.update`, which stores and returns at once.

What the Node shows is learnt from one GET before the first patch (so an agent
restart with unchanged slots writes nothing, and platform labels left from an
earlier run are seen and removed) and from each patch's answer afterwards; after a
failure, and every ``RESYNC_S``, the Node is read again (a Node object deleted and
re-created by its kubelet comes back without our keys). The calls are ``get`` and
``patch`` on nodes, which is all the RBAC role grants.

:meth:`NodePublisher.clear` removes every owned key: the agent's clean stop when it is
uninstalled, so that a node without an agent no longer looks like an FPGA node.

:func:`list_nodes` is the one read of all Nodes, for the cluster view (operators'
credentials, not the agent's).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.errors import KubeError
from agent.kube.client import describe_api_error
from agent.kube.core import CoreCalls
from agent.kube.failurelog import FailureLog
from agent.kube.nodefields import (
    BITSTREAMS_ANNOTATION,
    HEARTBEAT_ANNOTATION,
    HEARTBEAT_S,
    MAX_LABEL_LEN,
    SLOTS_ANNOTATION,
    OwnedFields,
    as_mapping,
    clear_body,
    is_label_name,
    keys_of,
    owned_fields,
    patch_body,
    platform_labels,
)
from agent.kube.reflector import CONNECT_TIMEOUT_S, Backoff

logger = logging.getLogger(__name__)

#: Patches start at least this far apart (about two per second); changes in between are folded together.
MIN_PATCH_INTERVAL_S = 0.5
#: How often the Node is read again to put right what others changed (or a re-created Node).
RESYNC_S = 600.0
#: Read timeout of one GET or PATCH.
REQUEST_TIMEOUT_S = 10.0
PUBLISH_BACKOFF = Backoff(initial_s=1.0, max_s=60.0)
#: Nodes per page when listing every Node (as kubectl does).
LIST_PAGE_SIZE = 500
LIST_TIMEOUT_S = 60.0

_MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "fpga-slot"


class NodePublisher:
    """Keeps this node's owned annotations and labels equal to the latest :meth:`update`.

    Run :meth:`run` as a long-lived task; call :meth:`update` from the same loop at any time.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        *,
        min_interval_s: float = MIN_PATCH_INTERVAL_S,
        backoff: Backoff = PUBLISH_BACKOFF,
        resync_s: float = RESYNC_S,
        timeout_s: float = REQUEST_TIMEOUT_S,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: epoch seconds, for the heartbeat."""
        self.node_name = node_name
        self._heartbeat_s = heartbeat_s
        self._clock = clock
        self._beat: int | None = None
        #: While this says True, nothing is patched (a newer agent on the node publishes: an update's overlap).
        self.standby: Callable[[], bool] = lambda: False
        self._core = CoreCalls(api_client)
        self._min_interval_s = min_interval_s
        self._backoff = backoff
        self._resync_s = resync_s
        self._timeout_s = timeout_s
        self._desired: OwnedFields | None = None
        #: The owned keys as the Node showed them last (GET or PATCH answer); None: read it first.
        self._current: OwnedFields | None = None
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._last_patch: float | None = None
        self._failures = FailureLog(logger, f"publishing slot state on node {node_name}")
        self._reported_platforms: set[str] = set()
        self._reported_dropped = False
        self.patches = 0
        self.reads = 0
        self.failures = 0

    def update(self, slots_json: str, bitstreams_json: str, platforms: Set[str]) -> None:
        """Make this the state to publish; returns at once (the newest state wins)."""
        for platform in sorted(set(platforms) - self._reported_platforms):
            if not is_label_name(platform):
                self._reported_platforms.add(platform)
                logger.warning(
                    "node %s: platform %r is not a valid label value (at most %d letters, digits, '-', '_', '.', "
                    "alphanumeric at both ends): no platform label for it; the %s annotation still names it",
                    self.node_name,
                    platform,
                    MAX_LABEL_LEN,
                    SLOTS_ANNOTATION,
                )
        if self._beat is None:
            self._beat = int(self._clock())
        desired = OwnedFields(
            {
                SLOTS_ANNOTATION: slots_json,
                BITSTREAMS_ANNOTATION: bitstreams_json,
                HEARTBEAT_ANNOTATION: str(self._beat),
            },
            platform_labels(platforms),
        )
        if desired == self._desired:
            return
        self._desired = desired
        self._settled.clear()
        self._wake.set()

    @property
    def published(self) -> bool:
        """Whether the Node showed the latest desired state when last read or patched."""
        return self._settled.is_set()

    async def wait_published(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until the latest update is on the Node; False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Publish until cancelled: wait for a difference, pace, patch, retry with backoff."""
        attempt = 0
        while True:
            await self._wait_for_work()
            await self._pace()
            try:
                await self._publish()
            except Exception as exc:
                self._current = None  # the outcome is unknown: read the Node before the next patch
                self.failures += 1
                kind, text = describe_api_error(exc)
                delay = self._backoff.delay_s(attempt)
                attempt += 1
                self._failures.failed(kind, text, f"trying again in {delay:.1f}s")
                await asyncio.sleep(delay)
                continue
            attempt = 0
            self._failures.succeeded()

    def _has_work(self) -> bool:
        if self._desired is None or self.standby():
            return False
        return self._current is None or patch_body(self._desired, self._current) is not None

    async def _wait_for_work(self) -> None:
        while True:
            self._renew_heartbeat()
            if self._has_work():
                return
            self._settled.set()
            self._wake.clear()
            loop = asyncio.get_running_loop()
            resync_at = loop.time() + self._resync_s
            try:
                async with asyncio.timeout(min(self._resync_s, self._until_heartbeat())):
                    await self._wake.wait()
            except TimeoutError:
                if self._desired is not None and loop.time() >= resync_at:
                    self._current = None  # read the Node again and put right what differs

    def _until_heartbeat(self) -> float:
        return self._heartbeat_s if self._beat is None else max(0.0, self._beat + self._heartbeat_s - self._clock())

    def _renew_heartbeat(self) -> None:
        """A new heartbeat in the desired state once the last one is ``heartbeat_s`` old."""
        desired = self._desired
        if desired is None or self._beat is None or self._until_heartbeat() > 0:
            return
        self._beat = int(self._clock())
        self._desired = OwnedFields({**desired.annotations, HEARTBEAT_ANNOTATION: str(self._beat)}, desired.labels)
        self._settled.clear()

    def _adopt_heartbeat(self, current: OwnedFields) -> None:
        """Before the first patch: a heartbeat on the Node younger than ``heartbeat_s`` (an agent restarted a
        moment ago) is kept, so that a restart with unchanged slots writes nothing."""
        desired = self._desired
        try:
            beat = int(current.annotations.get(HEARTBEAT_ANNOTATION, ""))
        except ValueError:
            return
        if desired is None or not 0 <= self._clock() - beat < self._heartbeat_s:
            return
        self._beat = beat
        self._desired = OwnedFields({**desired.annotations, HEARTBEAT_ANNOTATION: str(beat)}, desired.labels)

    async def clear(self) -> bool:
        """Remove every owned key from the Node (the agent's stop when uninstalled; call it once ``run`` has
        ended). False, with a warning naming the failure, when the Node could not be read or patched."""
        try:
            current = await asyncio.to_thread(self._read)
            body = clear_body(current)
            if body is not None:
                await asyncio.to_thread(self._patch, body)
        except Exception as exc:
            kind, text = describe_api_error(exc)
            logger.warning("node %s: slot state not removed (%s: %s)", self.node_name, kind, text)
            return False
        logger.info("removed the slot state, heartbeat and platform labels from node %s", self.node_name)
        return True

    async def _pace(self) -> None:
        if self._last_patch is None:
            return
        delay = self._last_patch + self._min_interval_s - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _publish(self) -> None:
        if self._current is None:
            self.reads += 1
            self._current = await asyncio.to_thread(self._read)
            if self.patches == 0:
                self._adopt_heartbeat(self._current)
        desired = self._desired
        assert desired is not None
        body = patch_body(desired, self._current)
        if body is None:
            return
        self._last_patch = asyncio.get_running_loop().time()
        current = await asyncio.to_thread(self._patch, body)
        self.patches += 1
        if self.patches == 1:
            logger.info("published slot state on node %s", self.node_name)
        else:
            logger.debug("patched node %s: %s", self.node_name, sorted(keys_of(body)))
        if patch_body(desired, current) is not None and not self._reported_dropped:
            # Something (an admission webhook?) changed our keys on the way in: do not patch in a loop.
            self._reported_dropped = True
            logger.warning(
                "node %s: the API server did not keep all of the slot state patched in; not patching again "
                "until the state changes",
                self.node_name,
            )
            current = desired
        self._current = current

    # --- worker thread --------------------------------------------------------------

    def _read(self) -> OwnedFields:
        response = self._core.read_node(
            self.node_name, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, self._timeout_s)
        )
        return owned_fields(_json_object(response))

    def _patch(self, body: dict[str, Any]) -> OwnedFields:
        response = self._core.patch_node(
            self.node_name,
            body,
            field_manager=FIELD_MANAGER,
            _content_type=_MERGE_PATCH,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, self._timeout_s),
        )
        return owned_fields(_json_object(response))


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A Node as the cluster view needs it: its name and the owned keys (all others dropped)."""

    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


def list_nodes(
    api_client: client.ApiClient, *, page_size: int = LIST_PAGE_SIZE, timeout_s: float = LIST_TIMEOUT_S
) -> list[NodeSummary]:
    """Every Node, sorted by name, with only the owned annotations and labels. Blocking.

    Reads in pages of ``page_size`` (a large cluster's Nodes do not arrive as one
    response). Raises KubeError naming the failure (unreachable, 401, 403, ...).
    """
    core = CoreCalls(api_client)
    nodes: list[NodeSummary] = []
    token = ""
    try:
        while True:
            kwargs: dict[str, Any] = {"limit": page_size}
            if token:
                kwargs["_continue"] = token
            response = core.list_node(_preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, timeout_s), **kwargs)
            body = _json_object(response)
            for item in body.get("items") or []:
                name = as_mapping(as_mapping(item).get("metadata")).get("name")
                if isinstance(name, str) and name:
                    owned = owned_fields(as_mapping(item))
                    nodes.append(NodeSummary(name, owned.annotations, owned.labels))
            token = str(as_mapping(body.get("metadata")).get("continue") or "")
            if not token:
                break
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        _, text = describe_api_error(exc)
        raise KubeError(f"listing nodes failed: {text}") from exc
    return sorted(nodes, key=lambda node: node.name)


def _json_object(response: Any) -> dict[str, Any]:
    """The JSON object of an unparsed response (``_preload_content=False``), connection released."""
    try:
        data = response.data
    finally:
        response.release_conn()
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("the API server's answer is not a JSON object")
    return body

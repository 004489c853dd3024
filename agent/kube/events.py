"""Kubernetes Events on pods: what the agent did with their slots, where ``kubectl describe pod`` shows it.

Posting never blocks or fails the caller: events go through a bounded queue (oldest dropped when full)
to one sender task; failures are retried only when transient. The body is a core/v1 Event as the
kubelet writes them (no ``eventTime``).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client

from agent.kube.client import REQUEST_TIMEOUT_S, FailureLog, api_status, describe_api_error, is_transient
from agent.kube.core import CoreCalls
from agent.kube.reflector import waited

logger = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

EVENT_QUEUE_SIZE = 256
#: Waits before the second and third attempt of a post that failed transiently.
EVENT_RETRY_DELAYS_S: tuple[float, ...] = (1.0, 5.0)
MAX_REASON_LEN = 128
MAX_MESSAGE_LEN = 1024
_MAX_NAME_LEN = 253


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One Event to post, as queued."""

    namespace: str
    pod_name: str
    pod_uid: str
    reason: str
    message: str
    type: EventType
    time: float

    def __str__(self) -> str:
        return f"{self.type} {self.reason} on pod {self.namespace}/{self.pod_name}"


class EventRecorder:
    """Posts Events about pods. Run ``run()`` as a long-lived task (the sender); ``post()`` on the same loop."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        component: str = "fpga-slot",
        *,
        queue_size: int = EVENT_QUEUE_SIZE,
        retry_delays_s: tuple[float, ...] = EVENT_RETRY_DELAYS_S,
    ) -> None:
        self.node_name = node_name
        self.component = component
        self._core = CoreCalls(api_client)
        self._queue: asyncio.Queue[PodEvent] = asyncio.Queue(maxsize=queue_size)
        self._retry_delays_s = retry_delays_s
        self._failures = FailureLog(logger, "posting Events")
        self._last_ns = 0

    async def post(
        self, namespace: str, pod_name: str, pod_uid: str, reason: str, message: str, type: str = "Normal"
    ) -> None:
        """Queue an Event on the pod; returns at once. A ``type`` other than ``"Normal"`` is posted as Warning."""
        if type not in ("Normal", "Warning"):
            logger.warning(
                "Event %s on pod %s/%s: unknown type %r, posting as Warning", reason, namespace, pod_name, type
            )
        event_type: EventType = "Normal" if type == "Normal" else "Warning"
        event = PodEvent(namespace, pod_name, pod_uid, reason, message, event_type, time.time())
        if self._queue.full():
            oldest = self._queue.get_nowait()
            self._queue.task_done()
            logger.warning("Event queue full (%d): dropping %s", self._queue.maxsize, oldest)
        self._queue.put_nowait(event)

    async def run(self) -> None:
        """Post queued Events one at a time until cancelled."""
        try:
            while True:
                event = await self._queue.get()
                try:
                    await self._send(event)
                finally:
                    self._queue.task_done()
        finally:
            if not self._queue.empty():
                logger.info("stopping with %d Events not posted", self._queue.qsize())

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every queued Event was posted or given up; False on timeout."""
        return await waited(self._queue.join(), timeout_s)

    async def _send(self, event: PodEvent) -> None:
        body = self.event_body(event)
        for attempt in range(len(self._retry_delays_s) + 1):
            try:
                await asyncio.to_thread(
                    self._core.create_namespaced_event, event.namespace, body, _request_timeout=REQUEST_TIMEOUT_S
                )
            except Exception as exc:
                if attempt > 0 and api_status(exc) == 409:
                    # An earlier attempt timed out on our side but reached the server.
                    self._failures.succeeded()
                    return
                kind, text = describe_api_error(exc)
                retry = is_transient(exc) and attempt < len(self._retry_delays_s)
                self._failures.failed(kind, f"{event}: {text}", "trying again" if retry else "dropped")
                if not retry:
                    return
                await asyncio.sleep(self._retry_delays_s[attempt])
            else:
                self._failures.succeeded()
                logger.debug("posted %s: %s", event, event.message)
                return

    def event_body(self, event: PodEvent) -> dict[str, Any]:
        """The core/v1 Event for ``event`` as JSON (what is sent)."""
        stamp = datetime.datetime.fromtimestamp(event.time, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._last_ns = max(time.time_ns(), self._last_ns + 1)  # unique even within one clock tick
        suffix = f".{self._last_ns:x}"
        involved: dict[str, Any] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": event.namespace,
            "name": event.pod_name,
        }
        if event.pod_uid:
            involved["uid"] = event.pod_uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                # Like the kubelet's: <object name>.<unique hex>, within the 253 characters of a name.
                "name": event.pod_name[: _MAX_NAME_LEN - len(suffix)].rstrip(".-") + suffix,
                "namespace": event.namespace,
            },
            "involvedObject": involved,
            "reason": event.reason[:MAX_REASON_LEN],
            "message": event.message[:MAX_MESSAGE_LEN],
            "type": event.type,
            "source": {"component": self.component, "host": self.node_name},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.node_name,
        }

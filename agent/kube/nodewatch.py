"""Every Node's labels and annotations, kept current by one list+watch, for the scheduler extender.

The extender answers kube-scheduler from memory (``nodeCacheCapable``), so it needs
the slot state that the agents publish on their Nodes, for all nodes, all the
time. One list+watch of Nodes (the reflector: relist after ``410 Gone`` or a
dropped watch, backoff, resourceVersion bookkeeping) does that with one request
per change instead of one per scheduling call.

This module reads the wire only: each Node is cut down to :class:`NodeMeta` (name,
resourceVersion, labels, annotations) right after it is read, and the caller's
``parse`` turns that into its own value in the same worker thread, once per node
update. What the annotations mean is the extender's business, not this module's.
Whole Node objects (status, images, conditions: kilobytes each) are dropped at once.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kubernetes import client

from agent.kube.core import CoreCalls
from agent.kube.reflector import DEFAULT_BACKOFF, WATCH_TIMEOUT_S, Backoff, Reflector, WatchEventKind

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NodeMeta:
    """The part of a Node the extender reads."""

    name: str
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def parse_node_meta(obj: Mapping[str, Any]) -> NodeMeta:
    """Name, resourceVersion, labels and annotations of a Node as JSON; ValueError without a name."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    return NodeMeta(
        name=name,
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=types.MappingProxyType(_strings(meta.get("labels"))),
        annotations=types.MappingProxyType(_strings(meta.get("annotations"))),
    )


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


class NodeWatcher(Generic[T]):
    """Lists and watches all Nodes until cancelled; hands each one, parsed by ``parse``, to the callbacks.

    ``parse(meta)`` runs in the worker thread. The callbacks run on the event loop:
    ``on_replace(values)`` after each list, ``on_event(kind, value)`` per watch event
    (``ADDED``, ``MODIFIED``, ``DELETED``), ``on_error(text)`` when a list fails.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        parse: Callable[[NodeMeta], T],
        on_replace: Callable[[list[T]], None],
        on_event: Callable[[WatchEventKind, T], None],
        on_error: Callable[[str], None],
        label_selector: str = "",
        backoff: Backoff = DEFAULT_BACKOFF,
        watch_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        core = CoreCalls(api_client)
        list_kwargs = {"label_selector": label_selector} if label_selector else {}
        self._reflector: Reflector[T] = Reflector(
            name="nodes",
            description="nodes",
            list_func=core.list_node,
            list_kwargs=list_kwargs,
            parse=lambda obj: parse(parse_node_meta(obj)),
            on_replace=on_replace,
            on_event=on_event,
            on_error=on_error,
            backoff=backoff,
            watch_timeout_s=watch_timeout_s,
        )

    async def run(self) -> None:
        """List and watch Nodes until cancelled (the watch is closed on the way out)."""
        logger.info("watching nodes")
        await self._reflector.run()

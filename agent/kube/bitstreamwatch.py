"""Every FpgaBitstream object (example.com/v1alpha1, cluster-scoped), kept current by one list+watch.

The agent pulls a bitstream only if the cluster declares it, so it needs every
declaration, all the time, without asking the API server per pod. One list+watch
(the reflector: relist after ``410 Gone`` or a dropped watch, backoff,
resourceVersion bookkeeping) keeps them; the objects are few and small.

This module reads the wire only: each object reaches the caller's ``parse`` (in the
worker thread) as the JSON the API server sent. What a declaration means, and what
to do with one that does not parse, is the caller's business.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from kubernetes import client

from agent.kube.core import CoreCalls
from agent.kube.reflector import DEFAULT_BACKOFF, WATCH_TIMEOUT_S, Backoff, Reflector, WatchEventKind

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BitstreamWatcher(Generic[T]):
    """Lists and watches all FpgaBitstream objects until cancelled; hands each, parsed by ``parse``, on.

    ``parse(obj)`` runs in the worker thread and may raise ValueError to skip an
    object. The callbacks run on the event loop: ``on_replace(values)`` after each
    list, ``on_event(kind, value)`` per watch event (``ADDED``, ``MODIFIED``,
    ``DELETED``), ``on_error(text)`` when a list fails (for example before the CRD
    is installed: the watcher keeps trying with backoff).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        parse: Callable[[Mapping[str, Any]], T],
        on_replace: Callable[[list[T]], None],
        on_event: Callable[[WatchEventKind, T], None],
        on_error: Callable[[str], None],
        backoff: Backoff = DEFAULT_BACKOFF,
        watch_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        core = CoreCalls(api_client)
        self._reflector: Reflector[T] = Reflector(
            name="fpgabitstreams",
            description="FpgaBitstream objects",
            list_func=core.list_fpga_bitstream,
            list_kwargs={},
            parse=parse,
            on_replace=on_replace,
            on_event=on_event,
            on_error=on_error,
            backoff=backoff,
            watch_timeout_s=watch_timeout_s,
        )

    async def run(self) -> None:
        """List and watch FpgaBitstream objects until cancelled (the watch is closed on the way out)."""
        logger.info("watching FpgaBitstream objects")
        await self._reflector.run()

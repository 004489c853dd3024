"""List, then watch, one kind of object in a worker thread; hand what changes to the event loop.

``410 Gone`` lists again at once, other errors after a jittered, capped backoff. Cancelling ``run()``
shuts the open response down at the socket and waits for the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from kubernetes import watch
from kubernetes.client import ApiClient

from agent.kube.client import FailureLog, api_status, describe_api_error
from agent.kube.core import CoreCalls
from agent.kube.nodefields import as_mapping

logger = logging.getLogger(__name__)

T = TypeVar("T")
WatchEventKind = Literal["ADDED", "MODIFIED", "DELETED"]
#: The kinds a :class:`Watcher` lists and watches cluster-wide.
WatchedKind = Literal["fpganodestates", "fpgabitstreams", "resourceclaimtemplates", "resourceclaims"]
_EVENT_KINDS: frozenset[str] = frozenset(("ADDED", "MODIFIED", "DELETED"))

#: Server-side length of one watch; each watch asks for a random value in [1x, 2x) (as client-go does).
WATCH_TIMEOUT_S = 300.0
#: How much longer than the server-side timeout a silent watch may stay before the read times out.
WATCH_READ_MARGIN_S = 30.0
CONNECT_TIMEOUT_S = 10.0
LIST_TIMEOUT_S = 60.0
#: A watch the server ends sooner than this without any event counts as a failure (no tight loop).
MIN_WATCH_S = 1.0
#: How long ``run()`` waits for the worker thread after cancellation.
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: attempt n waits up to ``initial_s * 2**n``, at most ``max_s``."""

    initial_s: float = 0.5
    max_s: float = 30.0

    def delay_s(self, attempt: int) -> float:
        ceiling = min(self.max_s, self.initial_s * (2.0 ** min(attempt, 30)))
        return ceiling * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not cryptography


DEFAULT_BACKOFF = Backoff()


async def waited(awaitable: Awaitable[object], timeout_s: float) -> bool:
    """Await ``awaitable`` for up to ``timeout_s``; False on timeout."""
    try:
        async with asyncio.timeout(timeout_s):
            await awaitable
    except TimeoutError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _WatchEnd:
    reason: Literal["stopped", "expired", "broken"]
    resource_version: str
    #: Whether the watch delivered events or completed a server-side timeout: not a crash loop.
    productive: bool


class Reflector(Generic[T]):
    """Keeps one list+watch going in a worker thread until ``run()`` is cancelled.

    ``list_func`` (a client list method) is called with ``list_kwargs``. ``parse`` runs in the worker
    thread (ValueError skips the object). The callbacks run on the event loop, in order:
    ``on_replace(values)`` after each list, ``on_event(kind, value)`` per watch event,
    ``on_error(text)`` (if given) when a list fails.
    """

    def __init__(
        self,
        *,
        name: str,
        description: str,
        list_func: Callable[..., Any],
        list_kwargs: Mapping[str, Any] | None = None,
        parse: Callable[[Mapping[str, Any]], T],
        on_replace: Callable[[list[T]], None],
        on_event: Callable[[WatchEventKind, T], None],
        on_error: Callable[[str], None] | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self._name = name
        self._description = description
        self._list_func = list_func
        self._list_kwargs = dict(list_kwargs or {})
        self._parse = parse
        self._on_replace = on_replace
        self._on_event = on_event
        self._on_error = on_error
        self._backoff = backoff
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._list_failures = FailureLog(logger, f"listing {description}")
        self._watch_failures = FailureLog(logger, f"watching {description}")

    async def run(self) -> None:
        """List and watch until cancelled; the worker thread has ended when this returns."""
        logger.info("watching %s", self._description)
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        self._stop.clear()
        thread = threading.Thread(
            target=self._thread_main, args=(loop, finished), name=f"kube-watch-{self._name}", daemon=True
        )
        thread.start()
        try:
            await asyncio.shield(finished)
        finally:
            self.stop()
            if not finished.done() and not await waited(asyncio.shield(finished), STOP_TIMEOUT_S):
                logger.warning("the worker thread for %s did not stop in time", self._description)
            if finished.done():
                thread.join(timeout=1.0)

    def stop(self) -> None:
        """Ask the worker thread to end and unblock its current read. Thread-safe."""
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            _shutdown(response)

    # --- worker thread -------------------------------------------------------------

    def _thread_main(self, loop: asyncio.AbstractEventLoop, finished: asyncio.Future[None]) -> None:
        error: BaseException | None = None
        try:
            self._work(loop)
        except BaseException as exc:  # a bug: hand it to run() instead of dying silently
            error = exc
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(_resolve, finished, error)

    def _work(self, loop: asyncio.AbstractEventLoop) -> None:
        list_params: dict[str, str] = {"resource_version": "0"}
        attempt = 0
        while not self._stop.is_set():
            try:
                values, version = self._list(list_params)
            except Exception as exc:
                if self._stop.is_set():
                    return
                if api_status(exc) in (410, 504):
                    list_params = {}  # that version is unavailable: consistent read next
                kind, text = describe_api_error(exc)
                delay = self._backoff.delay_s(attempt)
                attempt += 1
                self._list_failures.failed(kind, text, f"trying again in {delay:.1f}s")
                if self._on_error is not None:
                    self._deliver(loop, self._on_error, f"listing {self._description} failed: {text}")
                self._stop.wait(delay)
                continue
            self._list_failures.succeeded()
            logger.debug("listed %d %s at resourceVersion %s", len(values), self._description, version)
            self._deliver(loop, self._on_replace, values)
            end = self._watch(loop, version)
            if end.reason == "stopped":
                return
            list_params = {"resource_version": end.resource_version, "resource_version_match": "NotOlderThan"}
            if end.productive:
                attempt = 0
                if end.reason == "expired":
                    continue  # the normal case of 410: list again at once
            self._stop.wait(self._backoff.delay_s(attempt))
            attempt += 1

    def _list(self, params: Mapping[str, str]) -> tuple[list[T], str]:
        response = self._open(
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, LIST_TIMEOUT_S),
            **params,
            **self._list_kwargs,
        )
        try:
            body = json.loads(response.data)
        finally:
            self._forget_response()
            response.release_conn()
        if not isinstance(body, dict):
            raise ValueError("the list response is not a JSON object")
        version = str(as_mapping(body.get("metadata")).get("resourceVersion") or "")
        if not version:
            raise ValueError("the list response has no metadata.resourceVersion")
        values: list[T] = []
        for raw in body.get("items") or []:
            value = self._parse_or_skip(raw)
            if value is not None:
                values.append(value)
        return values, version

    def _watch(self, loop: asyncio.AbstractEventLoop, version: str) -> _WatchEnd:
        stream = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
        events = 0
        resumed = 0
        while not self._stop.is_set():
            timeout_s = max(1, int(WATCH_TIMEOUT_S * random.uniform(1.0, 2.0)))  # noqa: S311 - spread
            started = time.monotonic()
            events_before = events
            lines = stream.stream(  # type: ignore[no-untyped-call]
                self._open,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _request_timeout=(CONNECT_TIMEOUT_S, timeout_s + WATCH_READ_MARGIN_S),
                **self._list_kwargs,
            )
            try:
                for event in lines:
                    if self._stop.is_set():
                        break
                    kind = str(event.get("type"))
                    raw = as_mapping(event.get("raw_object"))
                    version = str(as_mapping(raw.get("metadata")).get("resourceVersion") or version)
                    if kind in _EVENT_KINDS:
                        events += 1
                        value = self._parse_or_skip(raw)
                        if value is not None:
                            self._deliver(loop, self._on_event, kind, value)
                    elif kind != "BOOKMARK":
                        logger.debug("watch of %s: ignoring event type %r", self._description, kind)
            except Exception as exc:
                if self._stop.is_set():
                    break
                if api_status(exc) == 410:
                    logger.info(
                        "watch of %s expired at resourceVersion %s (410 Gone); listing again",
                        self._description,
                        version,
                    )
                    return _WatchEnd("expired", version, events + resumed > 0)
                kind, text = describe_api_error(exc)
                self._watch_failures.failed(kind, text, "listing again")
                return _WatchEnd("broken", version, events + resumed > 0)
            finally:
                lines.close()  # closes the response (also after a break)
                self._forget_response()
            if self._stop.is_set():
                break
            if events == events_before and time.monotonic() - started < MIN_WATCH_S:
                self._watch_failures.failed("closed", "the API server ended the watch at once", "listing again")
                return _WatchEnd("broken", version, events + resumed > 0)
            resumed += 1
            logger.debug("watch of %s ended by the server; resuming at %s", self._description, version)
        return _WatchEnd("stopped", version, events + resumed > 0)

    def _open(self, **kwargs: Any) -> Any:
        """Call the list function and remember its response so that ``stop()`` can shut it."""
        response = self._list_func(**kwargs)
        with self._lock:
            self._response = response
        if kwargs.get("watch"):
            self._watch_failures.succeeded()
        if self._stop.is_set():
            _shutdown(response)
        return response

    def _forget_response(self) -> None:
        with self._lock:
            self._response = None

    def _parse_or_skip(self, raw: object) -> T | None:
        try:
            return self._parse(as_mapping(raw))
        except (ValueError, TypeError, KeyError) as exc:
            logger.warning("skipping a malformed object among %s: %s", self._description, exc)
            return None

    def _deliver(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._stop.set()


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _shutdown(response: Any) -> None:
    """Shut the socket under an urllib3 response so that a blocked read returns at once."""
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class Watcher(Reflector[T]):
    """Every object of ``kind`` in the cluster (a list fails until the kind's CRD is installed: it retries)."""

    def __init__(
        self, api_client: ApiClient, kind: WatchedKind, *, parse: Callable[[Mapping[str, Any]], T], **options: Any
    ) -> None:
        core = CoreCalls(api_client)
        description, list_func = {
            "fpganodestates": ("FpgaNodeState objects", core.list_fpga_node_state_for_all_namespaces),
            "fpgabitstreams": ("FpgaBitstream objects", core.list_fpga_bitstream),
            "resourceclaimtemplates": ("ResourceClaimTemplates", core.list_resource_claim_template_for_all_namespaces),
            "resourceclaims": ("ResourceClaims", core.list_resource_claim_for_all_namespaces),
        }[kind]
        super().__init__(name=kind, description=description, list_func=list_func, parse=parse, **options)

"""Serve the plugin socket, register with the kubelet, and do it again after a kubelet restart (noticed by inotify
or a closed ListAndWatch stream); of two agents on one node the newest wins.
See docs/how-it-works.md, "Kubelet restarts"."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import grpc

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent._proto.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from agent.deviceplugin import constants as c
from agent.deviceplugin.servicer import OPTIONS, DevicePluginServicer
from agent.errors import KubeletError, RegistrationError
from agent.files.atomic import identity, serve_in_place
from agent.files.dirwatch import DirEvent, DirWatcher
from agent.output.grpclog import bound_undecodable_request_logs

logger = logging.getLogger(__name__)


class PluginLifecycle:
    """Runs the serve/register/re-register loop until ``stop`` is set."""

    def __init__(
        self,
        directory: Path,
        servicer: DevicePluginServicer,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        """``directory``: the kubelet's device-plugin directory, where its socket and ours are."""
        self.directory = directory
        self.socket = directory / c.ENDPOINT
        self._interceptors = tuple(interceptors)
        self._servicer = servicer
        self._server: grpc.aio.Server | None = None
        self._socket_id: tuple[int, int] | None = None
        self._wake = asyncio.Event()
        self._reasons: list[str] = []
        self.registered = asyncio.Event()
        #: True while another process serves on our socket path and this one stepped aside
        self.superseded = False
        self.registrations = 0
        servicer.on_stream_closed = self._on_stream_closed

    async def run(self, stop: asyncio.Event) -> None:
        """Serve and stay registered until ``stop`` is set; then clean up."""
        self.directory.mkdir(parents=True, exist_ok=True)
        watcher = DirWatcher(self.directory, self._on_dir_event)
        watcher.start()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            delay = c.REGISTER_BACKOFF_MIN_S
            while not stop.is_set():
                registering = False
                try:
                    if not self._socket_is_ours():
                        if await self._taken_over():
                            await self._step_aside()
                            await self._sleep_or_wake(stopping, None)
                            continue
                        await self._restart_server()
                    elif await self._self_check() is not None:
                        logger.warning("socket %s is in place but does not answer: serving again", self.socket)
                        await self._restart_server()
                    # events until now are handled by this round; later ones wake the next
                    self._reasons.clear()
                    self._wake.clear()
                    if not self._socket_is_ours():
                        continue  # deleted while we checked it: serve again first
                    registering = True
                    await self._register()
                except KubeletError as exc:
                    if registering and not self._socket_is_ours():
                        # the kubelet is restarting: serve again and register at once
                        logger.info("socket %s deleted while registering: serving again", self.socket)
                        continue
                    logger.warning("registration failed, retrying in %.2f s: %s", delay, exc)
                    await self._sleep_or_wake(stopping, delay)
                    delay = min(delay * 2, c.REGISTER_BACKOFF_MAX_S)
                    continue
                delay = c.REGISTER_BACKOFF_MIN_S
                self.registered.set()
                await self._sleep_or_wake(stopping, None)
                if not stop.is_set():
                    self.registered.clear()
                    logger.info("kubelet restart noticed (%s): registering again", "; ".join(self._reasons))
        finally:
            stopping.cancel()
            watcher.stop()
            self.registered.clear()
            await self._shutdown()

    # ------------------------------------------------------------------ events
    def _trigger(self, reason: str) -> None:
        self._reasons.append(reason)
        self._wake.set()

    def _on_dir_event(self, event: DirEvent, name: str) -> None:
        if event is DirEvent.OVERFLOW:
            self._trigger("device-plugin directory events lost")
        elif event is DirEvent.CREATED and name == c.KUBELET_SOCKET:
            self._trigger(f"{c.KUBELET_SOCKET} created")
        elif event is DirEvent.DELETED and name == c.ENDPOINT and not self._socket_is_ours():
            self._trigger(f"{c.ENDPOINT} deleted")

    def _on_stream_closed(self, generation: int) -> None:
        if generation == self._servicer.generation and self._servicer.active_streams(generation) == 0:
            self._trigger("ListAndWatch stream closed by the kubelet")

    async def _sleep_or_wake(self, stopping: asyncio.Future[Literal[True]], delay: float | None) -> None:
        """Wait for a trigger, ``stop``, or ``delay`` seconds; the safety net re-checks the socket."""
        deadline = None if delay is None else time.monotonic() + delay
        while not stopping.done():
            timeout = c.SOCKET_RECHECK_S
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - time.monotonic()))
            waker = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait((waker, stopping), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            waker.cancel()
            if self._wake.is_set():
                self._wake.clear()
                return
            if not self._socket_is_ours():
                self._reasons.append(f"{c.ENDPOINT} replaced")
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    # ------------------------------------------------------------------ server
    async def _serve(self) -> None:
        path = self.socket
        with contextlib.suppress(FileNotFoundError):
            path.lstat()
            # replaced by serve_in_place's rename, never unlinked: an agent serving there must not see a deletion
            logger.info("replacing %s left by an earlier process", path)
        self._servicer.open_streams()
        bound_undecodable_request_logs()
        server = grpc.aio.server(interceptors=self._interceptors)
        self._server = server
        dp_grpc.add_DevicePluginServicer_to_server(self._servicer, server)
        self._socket_id = await serve_in_place(server, path)
        self.superseded = False
        if (problem := await self._self_check()) is not None:
            raise KubeletError(problem)
        logger.info("serving device plugin on %s", path)

    async def _ask_options(self) -> dp.DevicePluginOptions:
        """GetDevicePluginOptions from whatever serves our socket path (grpc.aio.AioRpcError)."""
        async with grpc.aio.insecure_channel(f"unix://{self.socket}", options=c.FRESH_CHANNEL_OPTIONS) as ch:
            return await dp_grpc.DevicePluginStub(ch).GetDevicePluginOptions(dp.Empty(), timeout=c.SELF_CHECK_TIMEOUT_S)

    async def _self_check(self) -> str | None:
        """What is wrong with the server on our socket (checked before every registration); None: it answers."""
        try:
            options = await self._ask_options()
        except grpc.aio.AioRpcError as exc:
            return f"own server on {self.socket} does not answer: {exc.code().name} {exc.details()}"
        if options != OPTIONS:
            return f"own server on {self.socket} answered unexpected options {options}"
        return None

    async def _restart_server(self) -> None:
        """Serve (again); a failure is a KubeletError so the caller retries with backoff."""
        if self._server is not None:
            logger.info("socket %s is gone or replaced: serving again", self.socket)
        await self._stop_server()
        try:
            await self._serve()
        except OSError as exc:
            await self._stop_server()
            raise KubeletError(f"cannot serve {self.socket}: {exc}") from exc
        except KubeletError:
            await self._stop_server()
            raise

    async def _stop_server(self) -> None:
        self._servicer.close_streams()
        if self._server is not None:
            await self._server.stop(c.STOP_GRACE_S)
            self._server = None

    async def _taken_over(self) -> bool:
        """Whether another process now serves on our socket path (only asked once we have served)."""
        if self._server is None and not self.superseded:
            return False
        try:
            if not stat.S_ISSOCK(self.socket.lstat().st_mode):
                return False
        except FileNotFoundError:
            return False
        try:
            await self._ask_options()
        except grpc.aio.AioRpcError:
            return False
        return True

    async def _step_aside(self) -> None:
        """Stop serving and stay unregistered while the other process serves."""
        if not self.superseded:
            logger.warning(
                "socket %s was taken over by another process (a newer agent?): stepping aside, "
                "serving again once it is gone",
                self.socket,
            )
            self.superseded = True
        self._reasons.clear()
        self.registered.clear()
        await self._stop_server()
        self._socket_id = None

    async def _shutdown(self) -> None:
        await self._stop_server()
        if self._socket_is_ours():
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()
            logger.info("removed socket %s", self.socket)
        self._socket_id = None

    def _socket_is_ours(self) -> bool:
        return self._socket_id is not None and identity(self.socket) == self._socket_id

    # ---------------------------------------------------------------- register
    async def _register(self) -> None:
        self._servicer.begin_generation()
        request = dp.RegisterRequest(
            version=c.API_VERSION,
            endpoint=c.ENDPOINT,
            resource_name=c.RESOURCE_NAME,
            options=OPTIONS,
        )
        target = self.directory / c.KUBELET_SOCKET
        try:
            async with grpc.aio.insecure_channel(f"unix://{target}", options=c.FRESH_CHANNEL_OPTIONS) as channel:
                await dp_grpc.RegistrationStub(channel).Register(request, timeout=c.REGISTER_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise RegistrationError(f"Register with {target}: {exc.code().name}: {exc.details()}") from exc
        self.registrations += 1
        logger.info(
            "registered %s with the kubelet at %s (endpoint %s)",
            c.RESOURCE_NAME,
            target,
            c.ENDPOINT,
        )

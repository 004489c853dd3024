"""A second kubelet stand-in that shares no code with the agent: same protocol, own wire format.

Why: the agent and ``agent.demo.kubelet`` are both built on the code generated from our
``protos/``, so a wrong method path or field number would be the same on both sides
and every test would still pass. This stand-in uses neither. gRPC carries raw bytes
(generic handlers on the server side, ``unary_unary``/``unary_stream`` with method
paths spelled out on the client side) and messages go through
:mod:`tests.integration.foreign_wire`, written from the upstream field numbers.

It does what the kubelet's device manager does, as far as a plugin can tell:

* ``Register`` validates the request, dials the plugin's endpoint with
  ``GetDevicePluginOptions`` before it returns, then reads ``ListAndWatch`` in a task;
  a new registration of a resource replaces the old connection;
* when a ``ListAndWatch`` stream ends, every device of that resource turns Unhealthy;
* ``restart()`` stops serving, deletes every socket in the device-plugin directory
  and creates ``kubelet.sock`` again (renamed into place; the plugin sees it appear
  just the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.integration import foreign_wire as wire
from tests.integration.foreign_wire import Message, Schema, WireError

REGISTRATION_SERVICE = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE = "v1beta1.DevicePlugin"
KUBELET_SOCKET = "kubelet.sock"
SUPPORTED_VERSIONS = ("v1beta1",)
#: The kubelet (Go gRPC) dials every registering plugin afresh. Python gRPC would share
#: one connection per address between channels, with the reconnect backoff (1 s and
#: more) of an earlier failed dial, and refuse a plugin that is already back.
OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)
#: How long Register may take to dial the plugin before it fails the registration.
DIAL_TIMEOUT_S = 5.0


@dataclass(slots=True)
class Registration:
    """One accepted RegisterRequest, as this stand-in decoded it."""

    request: Message
    options: Message
    accepted_at: float


@dataclass(slots=True)
class PluginEndpoint:
    """The connection to one registered plugin and the devices it last listed."""

    channel: grpc.aio.Channel
    devices: dict[str, Message] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


class ForeignKubelet:
    """Serves ``<plugin_dir>/kubelet.sock`` and talks to the plugins that register there."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.registrations: list[Registration] = []
        self.endpoints: dict[str, PluginEndpoint] = {}
        #: When kubelet.sock last appeared (monotonic clock).
        self.socket_created_at = 0.0
        self._server: grpc.aio.Server | None = None
        self._bind_count = 0
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()

    # ---------------------------------------------------------------- running
    async def start(self) -> None:
        """Create and serve kubelet.sock."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        handler = grpc.method_handlers_generic_handler(
            REGISTRATION_SERVICE, {"Register": grpc.unary_unary_rpc_method_handler(self._register)}
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        # gRPC unlinks a server's socket path when its listener is finally torn down,
        # possibly after a restart bound the same path again: bind under a name used
        # once and rename it to kubelet.sock, so the old server's late unlink misses.
        self._bind_count += 1
        bound = self.plugin_dir / f".{KUBELET_SOCKET}.{self._bind_count}"
        server.add_insecure_port(f"unix://{bound}")
        await server.start()
        os.replace(bound, self.plugin_dir / KUBELET_SOCKET)
        self._server = server
        self.socket_created_at = time.monotonic()

    async def stop(self) -> None:
        """Stop serving and drop every plugin connection, as a dying kubelet does."""
        for resource in list(self.endpoints):
            await self._disconnect(resource)
        if self._server is not None:
            await self._server.stop(0)
            self._server = None

    async def restart(self) -> None:
        """Stop, delete every socket in the device-plugin directory, serve kubelet.sock again."""
        await self.stop()
        for path in self.plugin_dir.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
        await self.start()

    # ----------------------------------------------------------- registration
    async def _register(self, raw: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        try:
            request = wire.decode(wire.REGISTER_REQUEST, raw)
        except WireError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable RegisterRequest: {exc}")
        error = _invalid_registration(request)
        if error is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
        resource = request["resource_name"]
        async with self._lock:
            await self._disconnect(resource)
            target = f"unix://{self.plugin_dir / request['endpoint']}"
            channel = grpc.aio.insecure_channel(target, options=OWN_CONNECTION)
            try:
                options = await self._call(
                    channel,
                    "GetDevicePluginOptions",
                    wire.EMPTY,
                    {},
                    wire.DEVICE_PLUGIN_OPTIONS,
                    DIAL_TIMEOUT_S,
                )
            except grpc.aio.AioRpcError as exc:
                await channel.close()
                await context.abort(grpc.StatusCode.UNKNOWN, f"cannot dial {request['endpoint']}: {exc.code().name}")
            endpoint = PluginEndpoint(channel)
            endpoint.reader = asyncio.create_task(self._read_devices(endpoint), name=f"foreign ListAndWatch {resource}")
            self.endpoints[resource] = endpoint
            self.registrations.append(Registration(request, options, time.monotonic()))
            self._notify()
        return wire.encode(wire.EMPTY, {})

    async def _read_devices(self, endpoint: PluginEndpoint) -> None:
        stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = endpoint.channel.unary_stream(
            f"/{DEVICE_PLUGIN_SERVICE}/ListAndWatch"
        )
        call = stream(wire.encode(wire.EMPTY, {}))
        try:
            async for raw in call:
                response = wire.decode(wire.LIST_AND_WATCH_RESPONSE, raw)
                endpoint.devices = {device["ID"]: device for device in response["devices"]}
                self._notify()
        except grpc.aio.AioRpcError:
            pass  # the plugin went away: same outcome as a clean end
        finally:
            call.cancel()
            endpoint.devices = {i: {**d, "health": "Unhealthy"} for i, d in endpoint.devices.items()}
            self._notify()

    async def _disconnect(self, resource: str) -> None:
        endpoint = self.endpoints.pop(resource, None)
        if endpoint is None:
            return
        if endpoint.reader is not None:
            endpoint.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await endpoint.reader
        await endpoint.channel.close()

    # ------------------------------------------------------------------- RPCs
    async def call(
        self,
        resource: str,
        method: str,
        request_schema: Schema,
        request: Message,
        response_schema: Schema,
        timeout_s: float | None = None,
    ) -> Message:
        """Call ``DevicePlugin/<method>`` on the plugin registered for ``resource``."""
        channel = self.endpoints[resource].channel
        return await self._call(channel, method, request_schema, request, response_schema, timeout_s)

    @staticmethod
    async def _call(
        channel: grpc.aio.Channel,
        method: str,
        request_schema: Schema,
        request: Message,
        response_schema: Schema,
        timeout_s: float | None,
    ) -> Message:
        # No serializers: the call takes and returns raw bytes.
        rpc: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{DEVICE_PLUGIN_SERVICE}/{method}")
        raw = await rpc(wire.encode(request_schema, request), timeout=timeout_s)
        return wire.decode(response_schema, raw)

    def devices(self, resource: str) -> dict[str, Message]:
        """The devices last listed for ``resource`` (none when it is not registered)."""
        endpoint = self.endpoints.get(resource)
        return {} if endpoint is None else endpoint.devices

    # ---------------------------------------------------------------- waiting
    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Wait until ``predicate()`` holds, re-checked on every change; TimeoutError after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def _invalid_registration(request: Message) -> str | None:
    """The kubelet's checks: known version, extended resource name, endpoint file name."""
    if request["version"] not in SUPPORTED_VERSIONS:
        return f"unsupported device plugin API version {request['version']!r}"
    name = request["resource_name"]
    if "/" not in name or name.startswith("kubernetes.io/"):
        return f"invalid extended resource name {name!r}"
    if not request["endpoint"] or "/" in request["endpoint"]:
        return f"invalid endpoint {request['endpoint']!r}"
    return None

"""Serving the DRA plugin: the registration socket the kubelet's plugin watcher finds, and the DRA socket, each
bound under a one-off name and renamed into place, removed on stop only while still ours (same inode)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from agent._proto.dra.v1 import api_pb2_grpc as v1_grpc
from agent._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from agent._proto.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from agent._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from agent.dra.constants import DRIVER_NAME, HEALTH_SERVICE, STOP_GRACE_S, SUPPORTED_VERSIONS
from agent.dra.health import HealthBoard, HealthServicer
from agent.dra.service import ClaimPreparer, DraCore, DraV1beta1Servicer, DraV1Servicer, RegistrationServicer
from agent.errors import KubeletError
from agent.files.atomic import identity, serve_in_place
from agent.output.grpclog import bound_undecodable_request_logs

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PluginSockets:
    """Where the sockets go: ``<registry>/<driver>-reg.sock`` and ``<plugins>/<driver>/dra.sock``, or with an
    ``instance`` (the pod UID) ``<driver>-<instance>-reg.sock`` and ``dra-<instance>.sock``."""

    registry_dir: Path  # the kubelet's plugin watcher directory (--dra-registry-dir)
    plugins_dir: Path  # the directory of plugins' own sockets (--dra-plugins-dir)
    driver: str = DRIVER_NAME
    instance: str = ""

    @property
    def registration(self) -> Path:
        middle = f"-{self.instance}" if self.instance else ""
        return self.registry_dir / f"{self.driver}{middle}-reg.sock"

    @property
    def dra(self) -> Path:
        return self.plugins_dir / self.driver / (f"dra-{self.instance}.sock" if self.instance else "dra.sock")

    @property
    def lock(self) -> Path:
        """The file every instance of the driver on this node locks for each call (one call at a time)."""
        return self.plugins_dir / self.driver / "serialize.lock"


class DraPluginServer:
    """The two gRPC servers of the DRA plugin (on the agent's event loop), started and stopped together."""

    def __init__(
        self,
        preparer: ClaimPreparer,
        sockets: PluginSockets,
        health: HealthBoard | None = None,
        on_registered: Callable[[], None] | None = None,
    ) -> None:
        """With ``health``, the resource-health stream is served too."""
        self.sockets = sockets
        self._core = DraCore(preparer, self.sockets.lock)
        #: The calls' lock (:meth:`DraCore.exclusive`), for work on the slots outside a call.
        self.exclusive = self._core.exclusive
        versions = SUPPORTED_VERSIONS + ((HEALTH_SERVICE,) if health is not None else ())
        self.registration = RegistrationServicer(self.sockets.driver, str(self.sockets.dra), versions, on_registered)
        self.health = health
        self._servers: list[grpc.aio.Server] = []
        self._placed: list[tuple[Path, tuple[int, int]]] = []
        #: When our registration socket was placed (its mtime, ns): kept after stop, for superseded().
        self._placed_at: int | None = None

    @property
    def placed(self) -> bool:
        """Whether our registration socket has been placed (from then on the kubelet may use this instance)."""
        return self._placed_at is not None

    def superseded(self) -> bool:
        """Whether another instance of the driver placed its registration socket after ours (the kubelet uses it)."""
        mine = self._placed_at
        if mine is None:
            return False
        for other in self._other_registrations():
            try:
                if other.stat().st_mtime_ns > mine:
                    return True
            except FileNotFoundError:
                continue
        return False

    def _other_registrations(self) -> list[Path]:
        found = self.sockets.registry_dir.glob(f"{self.sockets.driver}-*reg.sock")
        return sorted(p for p in found if p != self.sockets.registration)

    def _remove_dead_instances(self) -> None:
        """Remove the sockets of the driver's other instances that refuse a connection."""
        removed = []
        prefix = f"{self.sockets.driver}-"
        for registration in self._other_registrations():
            if not _refuses(registration):
                continue
            instance = registration.name.removeprefix(prefix).removesuffix("reg.sock").rstrip("-")
            dra = dataclasses.replace(self.sockets, instance=instance).dra
            for path in (registration, dra):
                if path.is_socket() and _refuses(path):
                    path.unlink(missing_ok=True)
                    removed.append(path)
        if removed:
            logger.info("removed the sockets of stopped driver instances: %s", ", ".join(map(str, removed)))

    async def start(self) -> None:
        """Serve the DRA socket, then the registration socket; KubeletError (nothing left) when one cannot be."""
        bound_undecodable_request_logs()
        try:
            await asyncio.to_thread(self._remove_dead_instances)
            await self._start_one(self.sockets.dra, self._add_dra)
            await self._start_one(
                self.sockets.registration,
                lambda server: reg_grpc.add_RegistrationServicer_to_server(self.registration, server),
            )
        except OSError as exc:
            await self.stop()
            raise KubeletError(f"cannot serve the DRA plugin: {exc}") from exc
        except BaseException:
            await self.stop()
            raise
        self._placed_at = self.sockets.registration.stat().st_mtime_ns
        logger.info(
            "serving DRA driver %s on %s, registration on %s",
            self.sockets.driver,
            self.sockets.dra,
            self.sockets.registration,
        )

    async def stop(self) -> None:
        """Stop serving (open health streams end first); remove each socket that is still ours."""
        if self.health is not None:
            self.health.close()
        for server in self._servers:
            await server.stop(STOP_GRACE_S)
        self._servers = []
        await self._core.close()
        for path, placed in self._placed:
            if identity(path) == placed:
                path.unlink(missing_ok=True)
        self._placed = []

    def _add_dra(self, server: grpc.aio.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(DraV1Servicer(self._core), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Servicer(self._core), server)
        if self.health is not None:
            health_grpc.add_DRAResourceHealthServicer_to_server(HealthServicer(self.health), server)

    async def _start_one(self, path: Path, add: Callable[[grpc.aio.Server], None]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        add(server)
        self._servers.append(server)  # from here on, stop() cleans it up whatever fails
        self._placed.append((path, await serve_in_place(server, path)))


def _refuses(path: Path) -> bool:
    """Whether nothing listens on the unix socket ``path`` (connection refused)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False

"""The kubelet's side of a DRA driver: plugin registration and NodePrepare/UnprepareResources calls.
Blocking: from async code call them through ``asyncio.to_thread``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from agent._proto.dra.v1 import api_pb2 as dra_v1
from agent._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from agent._proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from agent._proto.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from agent._proto.pluginregistration.v1 import api_pb2 as reg
from agent._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc


class DraKubelet:
    """The kubelet's side of a DRA plugin as v1.36 does it: GetInfo, pick the first known service version,
    notify the registration status, then call the plugin's endpoint with that version."""

    KNOWN = ("v1.DRAPlugin", "v1beta1.DRAPlugin")

    def __init__(self, registry_dir: Path, known: tuple[str, ...] = KNOWN) -> None:
        self.registry_dir = registry_dir
        self.known = known
        self.version = ""
        self.endpoint = ""

    def sockets(self) -> list[Path]:
        """What the plugin watcher would see: sockets, names starting with '.' ignored."""
        return sorted(p for p in self.registry_dir.iterdir() if not p.name.startswith(".") and p.is_socket())

    def register(self, socket: Path, *, accept: bool = True, error: str = "") -> reg.PluginInfo:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info: reg.PluginInfo = stub.GetInfo(reg.InfoRequest(), timeout=1.0)
            chosen = next((v for v in info.supported_versions if v in self.known), "")
            ok = accept and info.type == "DRAPlugin" and bool(chosen)
            stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=ok, error=error), timeout=1.0)
        self.version, self.endpoint = chosen, info.endpoint
        return info

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        """``claims``: (namespace, uid, name) each."""
        return self._call("NodePrepareResources", claims)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        return self._call("NodeUnprepareResources", claims)

    def _call(self, method: str, claims: tuple[tuple[str, str, str], ...]) -> Any:
        v1 = self.version == "v1.DRAPlugin"
        pb, pb_grpc = (dra_v1, dra_v1_grpc) if v1 else (dra_v1beta1, dra_v1beta1_grpc)
        request = getattr(pb, f"{method}Request")(claims=[pb.Claim(namespace=n, uid=u, name=m) for n, u, m in claims])
        with grpc.insecure_channel(f"unix://{self.endpoint}") as channel:
            return getattr(pb_grpc.DRAPluginStub(channel), method)(request, timeout=45.0)

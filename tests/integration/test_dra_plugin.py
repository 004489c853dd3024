"""The DRA plugin as the kubelet meets it: registration through the plugin registry, then
NodePrepareResources / NodeUnprepareResources on the advertised endpoint, over real unix sockets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent._proto.dra.v1 import api_pb2 as dra_v1
from agent._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from agent._proto.drahealth.v1alpha1 import api_pb2 as health_pb
from agent._proto.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from agent.demo.kubelet.dra import DraKubelet
from agent.dra.constants import DRIVER_NAME
from agent.dra.health import DeviceHealth, HealthBoard
from agent.dra.server import DraPluginServer, PluginSockets
from tests.fakes import FakeClaimPreparer, short_tmpdir
from tests.integration import foreign_wire as wire


@pytest.fixture
def sockets() -> Iterator[PluginSockets]:
    with short_tmpdir() as root:
        yield PluginSockets(registry_dir=root / "plugins_registry", plugins_dir=root / "plugins")


@pytest.fixture
def preparer() -> FakeClaimPreparer:
    return FakeClaimPreparer()


#: Health streams a kubelet may leave behind (it reopens the stream every 5 s after an error).
DROPPED_STREAMS = 4


@pytest.fixture
async def plugin(sockets: PluginSockets, preparer: FakeClaimPreparer) -> AsyncIterator[DraPluginServer]:
    server = DraPluginServer(preparer, sockets)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def kubelet(sockets: PluginSockets, plugin: DraPluginServer) -> DraKubelet:
    return DraKubelet(sockets.registry_dir)


async def test_the_plugin_watcher_finds_one_socket_and_registers_the_driver(
    kubelet: DraKubelet, plugin: DraPluginServer, sockets: PluginSockets
) -> None:
    (found,) = kubelet.sockets()
    assert found == sockets.registry_dir / f"{DRIVER_NAME}-reg.sock"
    info = await asyncio.to_thread(kubelet.register, found)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER_NAME
    assert info.endpoint == str(sockets.plugins_dir / DRIVER_NAME / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert kubelet.version == "v1.DRAPlugin"
    assert plugin.registration.status == (True, "")
    assert oct(found.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("known", [("v1.DRAPlugin",), ("v1beta1.DRAPlugin",)])
async def test_claims_are_prepared_and_released_in_either_api_version(
    sockets: PluginSockets, plugin: DraPluginServer, preparer: FakeClaimPreparer, known: tuple[str, ...]
) -> None:
    kubelet = DraKubelet(sockets.registry_dir, known)
    await asyncio.to_thread(kubelet.register, sockets.registration)
    assert kubelet.version == known[0]
    answer = await asyncio.to_thread(kubelet.prepare, ("team", "uid-1", "train-fpga"), ("team", "uid-2", "infer-fpga"))
    assert set(answer.claims) == {"uid-1", "uid-2"}
    (device,) = answer.claims["uid-1"].devices
    assert (device.pool_name, device.device_name, list(device.request_names)) == ("node-a", "slot-0", ["fpga"])
    assert list(device.cdi_device_ids) == [f"{DRIVER_NAME}/slot=uid-1-slot-0"]
    assert answer.claims["uid-1"].error == ""
    again = await asyncio.to_thread(kubelet.prepare, ("team", "uid-1", "train-fpga"))  # again, after a restart
    assert again.claims["uid-1"].devices == answer.claims["uid-1"].devices
    released = await asyncio.to_thread(
        kubelet.unprepare, ("team", "uid-1", "train-fpga"), ("team", "uid-gone", "never-prepared")
    )
    assert {uid: r.error for uid, r in released.claims.items()} == {"uid-1": "", "uid-gone": ""}
    assert set(preparer.prepared) == {"uid-2"}


async def test_a_preparation_outliving_the_kubelets_deadline_runs_to_its_end_for_the_next_try(
    sockets: PluginSockets, plugin: DraPluginServer, preparer: FakeClaimPreparer
) -> None:
    """Cut short, a programming would taint its slot; finished, the kubelet's next try finds the claim ready."""
    request = dra_v1.NodePrepareResourcesRequest(
        claims=[dra_v1.Claim(namespace="team", uid="uid-slow", name="slow-fpga")]
    )
    async with grpc.aio.insecure_channel(f"unix://{sockets.dra}") as channel:
        stub = dra_v1_grpc.DRAPluginStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as expired:
            await stub.NodePrepareResources(request, timeout=0.3)
        assert expired.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        preparer.slow_done.set()
        async with asyncio.timeout(5.0):
            await preparer.slow_prepared.wait()  # by the call whose RPC is gone, before any retry
        answer = await stub.NodePrepareResources(request, timeout=5.0)
    assert answer.claims["uid-slow"].error == ""
    assert [d.device_name for d in answer.claims["uid-slow"].devices] == ["slot-0"]


async def test_a_claim_that_cannot_be_prepared_fails_alone_and_says_why(
    kubelet: DraKubelet, sockets: PluginSockets, preparer: FakeClaimPreparer, caplog: pytest.LogCaptureFixture
) -> None:
    await asyncio.to_thread(kubelet.register, sockets.registration)
    with caplog.at_level(logging.WARNING):
        answer = await asyncio.to_thread(
            kubelet.prepare, ("team", "uid-ok", "good"), ("team", "uid-bad", "broken-bitstream")
        )
    assert answer.claims["uid-ok"].error == ""
    assert len(answer.claims["uid-ok"].devices) == 1
    bad = answer.claims["uid-bad"]
    assert list(bad.devices) == []
    assert bad.error == "claim team/broken-bitstream: its bitstream failed verification"
    assert set(preparer.prepared) == {"uid-ok"}  # nothing kept for the failed claim
    assert sum("not prepared" in r.getMessage() for r in caplog.records) == 1
    released = await asyncio.to_thread(kubelet.unprepare, ("team", "uid-ok", "broken-release"))
    assert released.claims["uid-ok"].error == "claim team/broken-release: the CDI spec could not be removed"


async def test_a_claim_named_twice_is_prepared_once_and_one_without_uid_is_refused(
    kubelet: DraKubelet, sockets: PluginSockets, preparer: FakeClaimPreparer
) -> None:
    await asyncio.to_thread(kubelet.register, sockets.registration)
    answer = await asyncio.to_thread(
        kubelet.prepare, ("team", "uid-1", "a"), ("team", "uid-1", "a"), ("team", "", "nameless\nx" * 50)
    )
    assert [c for c in preparer.calls if c[0] == "prepare"] == [("prepare", "uid-1")]
    assert "has no UID" in answer.claims[""].error
    assert "\n" not in answer.claims[""].error
    assert len(answer.claims[""].error) < 400


async def test_a_refused_registration_is_an_error_to_the_kubelet_and_logged(
    kubelet: DraKubelet, plugin: DraPluginServer, sockets: PluginSockets, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.RpcError) as raised:
        await asyncio.to_thread(kubelet.register, sockets.registration, accept=False, error="driver name clashes")
    assert "driver name clashes" in str(raised.value.details())
    assert plugin.registration.status == (False, "driver name clashes")
    assert any("refused DRA driver" in r.getMessage() for r in caplog.records)


async def test_stop_removes_its_sockets_but_not_a_newer_servers(
    sockets: PluginSockets, preparer: FakeClaimPreparer
) -> None:
    first = DraPluginServer(preparer, sockets)
    await first.start()
    second = DraPluginServer(preparer, sockets)  # a rolling update: the new agent takes the paths over
    await second.start()
    await first.stop()
    assert sockets.registration.is_socket()
    assert sockets.dra.is_socket()
    await asyncio.to_thread(DraKubelet(sockets.registry_dir).register, sockets.registration)
    assert second.registration.status == (True, "")
    await second.stop()
    assert not sockets.registration.exists()
    assert not sockets.dra.exists()
    assert [p.name for p in sockets.registry_dir.iterdir()] == []  # no bind leftovers


# ----------------------------------------------------------------- the wire, by hand
# Upstream field numbers (k8s.io/kubelet/pkg/apis/dra/v1/api.proto), independent of protos/.
CLAIM = wire._message(
    "Claim",
    wire.Field(1, "namespace", wire.Kind.STRING),
    wire.Field(2, "uid", wire.Kind.STRING),
    wire.Field(3, "name", wire.Kind.STRING),
)
PREPARE_REQUEST = wire._message("NodePrepareResourcesRequest", wire._messages(1, "claims", CLAIM))
DEVICE = wire._message(
    "Device",
    wire._strings(1, "request_names"),
    wire.Field(2, "pool_name", wire.Kind.STRING),
    wire.Field(3, "device_name", wire.Kind.STRING),
    wire._strings(4, "cdi_device_ids"),
    wire.Field(5, "share_id", wire.Kind.STRING),
)
PREPARE_ONE = wire._message(
    "NodePrepareResourceResponse", wire._messages(1, "devices", DEVICE), wire.Field(2, "error", wire.Kind.STRING)
)
# A map<string, Message> is, on the wire, repeated entries {key = 1, value = 2}.
PREPARE_ENTRY = wire._message(
    "ClaimsEntry", wire.Field(1, "key", wire.Kind.STRING), wire.Field(2, "value", wire.Kind.MESSAGE, schema=PREPARE_ONE)
)
PREPARE_RESPONSE = wire._message("NodePrepareResourcesResponse", wire._messages(1, "claims", PREPARE_ENTRY))
PLUGIN_INFO = wire._message(
    "PluginInfo",
    wire.Field(1, "type", wire.Kind.STRING),
    wire.Field(2, "name", wire.Kind.STRING),
    wire.Field(3, "endpoint", wire.Kind.STRING),
    wire._strings(4, "supported_versions"),
)


def _raw_call(socket: Path, method: str, payload: bytes) -> bytes:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        answer: bytes = call(payload, timeout=5.0)
        return answer


async def test_the_wire_matches_the_kubelets_field_numbers_and_method_paths(
    plugin: DraPluginServer, sockets: PluginSockets
) -> None:
    raw_info = await asyncio.to_thread(_raw_call, sockets.registration, "/pluginregistration.Registration/GetInfo", b"")
    info = wire.decode(PLUGIN_INFO, raw_info)
    assert (info["type"], info["name"], info["endpoint"]) == ("DRAPlugin", DRIVER_NAME, str(sockets.dra))
    request = wire.encode(PREPARE_REQUEST, {"claims": [{"namespace": "team", "uid": "uid-7", "name": "c"}]})
    for package in ("k8s.io.kubelet.pkg.apis.dra.v1", "k8s.io.kubelet.pkg.apis.dra.v1beta1"):
        raw = await asyncio.to_thread(_raw_call, sockets.dra, f"/{package}.DRAPlugin/NodePrepareResources", request)
        (entry,) = wire.decode(PREPARE_RESPONSE, raw)["claims"]
        assert entry["key"] == "uid-7"
        (device,) = entry["value"]["devices"]
        assert device["device_name"] == "slot-0"
        assert device["cdi_device_ids"] == [f"{DRIVER_NAME}/slot=uid-7-slot-0"]
        assert device["request_names"] == ["fpga"]


async def test_the_health_stream_sends_the_list_then_every_change_and_ends_with_the_server(
    sockets: PluginSockets, preparer: FakeClaimPreparer
) -> None:
    board = HealthBoard()
    board.set([DeviceHealth("node-a", "slot-0", True), DeviceHealth("node-a", "slot-1", None, "being programmed")])
    server = DraPluginServer(preparer, sockets, health=board)
    await server.start()
    try:
        info = await asyncio.to_thread(DraKubelet(sockets.registry_dir).register, sockets.registration)
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"]
        async with grpc.aio.insecure_channel(f"unix://{sockets.dra}") as channel:
            stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                health_pb.NodeWatchResourcesRequest(), timeout=10.0
            )
            first = await stream.read()
            assert [(d.device.pool_name, d.device.device_name, d.health, d.message) for d in first.devices] == [
                ("node-a", "slot-0", health_pb.HEALTHY, ""),
                ("node-a", "slot-1", health_pb.UNKNOWN, "being programmed"),
            ]
            assert all(d.health_check_timeout_seconds == 60 and d.last_updated_time > 0 for d in first.devices)
            board.set([DeviceHealth("node-a", "slot-0", False, "card unplugged")])
            (changed,) = (await stream.read()).devices
            assert (changed.device.device_name, changed.health, changed.message) == (
                "slot-0",
                health_pb.UNHEALTHY,
                "card unplugged",
            )
            await server.stop()
            assert await rest_of(stream) == []  # the stream ends with the server
    finally:
        await server.stop()


async def rest_of(stream: Any) -> list[health_pb.NodeWatchResourcesResponse]:
    """What a stream still yields until it ends. The server ends it cleanly, but its connection closes right
    after: a client that writes to it at that moment (flow control) sees the transport go (UNAVAILABLE)
    before it reads the clean end. Either way the stream has ended, which is what the kubelet acts on."""
    rest: list[health_pb.NodeWatchResourcesResponse] = []
    ended = grpc.StatusCode.OK
    try:
        while (answer := await stream.read()) is not grpc.aio.EOF:
            rest.append(answer)
    except grpc.aio.AioRpcError as exc:
        ended = exc.code()
    assert ended in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE), ended
    return rest


async def test_health_streams_whose_kubelet_went_away_hold_up_no_call(
    sockets: PluginSockets, preparer: FakeClaimPreparer
) -> None:
    """The kubelet reopens the stream every 5 s after an error: NodePrepareResources must not wait behind the
    streams it dropped."""
    board = HealthBoard()
    board.set([DeviceHealth("node-a", "slot-0", True)])
    server = DraPluginServer(preparer, sockets, health=board)
    await server.start()
    try:
        await asyncio.to_thread(DraKubelet(sockets.registry_dir).register, sockets.registration)
        async with grpc.aio.insecure_channel(f"unix://{sockets.dra}") as channel:
            stub = health_grpc.DRAResourceHealthStub(channel)
            streams = [stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest()) for _ in range(DROPPED_STREAMS)]
            for stream in streams:
                await stream.read()
            for stream in streams:
                stream.cancel()
            request = dra_v1.NodePrepareResourcesRequest(claims=[dra_v1.Claim(namespace="team", uid="u-1", name="c")])
            answer = await dra_v1_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=5.0)
        assert answer.claims["u-1"].error == ""
    finally:
        await server.stop()

"""The agent's metrics follow what happens over the real sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

import agent.node.slotloader
from agent.node.metrics import AgentMetrics
from tests.fakes import RESOURCE_NAME, AgentHarness, NodePods
from tests.integration.reconfigure.support import Bitstreams, wants


def sample(metrics: AgentMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_metrics_count_slots_rpcs_reconfigurations_and_cache_lookups(
    sock_dir: Path, bitstreams: Bitstreams, pods: NodePods
) -> None:
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods) as harness:
        metrics = harness.agent.metrics
        assert sample(metrics, "fpga_slot_slots", health="Healthy", state="free") == 8
        assert sample(metrics, "fpga_slot_kubelet_registrations_total") == 1

        first = await harness.kubelet.admit("default", "a1", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_a.name))
        harness.kubelet.delete_pod("default", "a1")
        await harness.agent.reconfigurer.reconcile()
        second = await harness.kubelet.admit("default", "a2", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_a.name))
        assert second.device_ids == first.device_ids

        assert sample(metrics, "fpga_slot_reconfigurations_total", result="programmed") == 1
        assert sample(metrics, "fpga_slot_reconfiguration_seconds_count") == 1
        assert sample(metrics, "fpga_slot_cache_lookups_total", result="miss") == 1
        assert sample(metrics, "fpga_slot_cache_lookups_total", result="hit") == 1
        assert sample(metrics, "fpga_slot_rpc_duration_seconds_count", method="Allocate") == 2
        assert sample(metrics, "fpga_slot_rpc_duration_seconds_count", method="PreStartContainer") == 2
        assert sample(metrics, "fpga_slot_slots", health="Healthy", state="held") == 1
        assert sample(metrics, "fpga_slot_slots_loaded") == 1


@pytest.mark.parametrize(
    ("inject", "result", "code"),
    [
        pytest.param("fail", "failed", grpc.StatusCode.INTERNAL, id="failure"),
        pytest.param("hang", "timeout", grpc.StatusCode.DEADLINE_EXCEEDED, id="timeout"),
    ],
)
async def test_failed_and_timed_out_programming_are_counted_apart(
    sock_dir: Path,
    bitstreams: Bitstreams,
    pods: NodePods,
    monkeypatch: pytest.MonkeyPatch,
    inject: str,
    result: str,
    code: grpc.StatusCode,
) -> None:
    monkeypatch.setattr(agent.node.slotloader, "RECOVERY_DELAY_S", 3600.0)  # keep the recovery out of the count
    async with AgentHarness.running(sock_dir, catalog=bitstreams.catalog, pods=pods, program_timeout_s=1) as harness:
        for card in ("simcard0", "simcard1"):
            for region in ("slot0", "slot1", "slot2", "slot3"):
                if inject == "fail":
                    harness.fabric.fail_next_program(card, region, "injected CRC error")
                else:
                    harness.fabric.hang_next_program(card, region)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await harness.kubelet.admit("default", "f", "main", RESOURCE_NAME, 1, wants(bitstreams.accel_b.name))
        assert failure.value.code() is code
        metrics = harness.agent.metrics
        assert sample(metrics, "fpga_slot_reconfigurations_total", result=result) == 1
        assert sample(metrics, "fpga_slot_reconfigurations_total", result="programmed") == 0
        assert sample(metrics, "fpga_slot_slots", health="Unhealthy", state="held") == 1


async def test_metrics_are_served_over_http_in_prometheus_format(sock_dir: Path) -> None:
    async with AgentHarness.running(sock_dir) as harness:
        health = harness.agent.health
        assert health is not None
        await asyncio.wait_for(health.serving.wait(), 10)
        await harness.kubelet.admit("default", "p", "main", RESOURCE_NAME, 1)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{health.port}/metrics") as response,
        ):
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=")
            text = await response.text()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert {
        "fpga_slot_slots",
        "fpga_slot_reconfigurations",
        "fpga_slot_reconfiguration_seconds",
        "fpga_slot_cache_lookups",
        "fpga_slot_rpc_duration_seconds",
        "fpga_slot_kubelet_registrations",
    } <= set(families)
    held = [s for s in families["fpga_slot_slots"].samples if s.labels == {"health": "Healthy", "state": "held"}]
    assert [s.value for s in held] == [1.0]

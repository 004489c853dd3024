"""``fpga-agent cluster --claims`` as an operator runs it: what each DRA claim's slots hold, read from the claims'
status.devices data on the fake API server (a real process, the real kubernetes client)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.fakeapi import make_resource_claim
from tests.fakes import run_fpga_agent

DRIVER = "fpga.example.com"
SHA = "ab" * 32


def entry(device: str, data: dict[str, Any], ready: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"driver": DRIVER, "pool": "node-a", "device": device, "data": data}
    if ready is not None:
        found["conditions"] = [{"type": f"{DRIVER}/Programmed", "status": ready}]
    return found


def put_claims(apiserver: Any) -> None:
    programmed = make_resource_claim("train", namespace="ml", driver=DRIVER, devices=[("fpga", "node-a", "c0-p1")])
    programmed["status"]["devices"] = [
        entry(
            "c0-p1",
            {"bitstream": "aes-v1", "sha256": SHA, "cacheHit": False, "programmedAt": "2026-12-06T05:00:00Z"},
            "True",
        ),
        {"driver": "gpu.example.com", "pool": "node-a", "device": "g0", "data": {"model": "x"}},
    ]
    apiserver.put_resource_claim(programmed)
    hit = make_resource_claim("infer", namespace="ml", driver=DRIVER, devices=[("fpga", "node-a", "c0-p0")])
    hit["status"]["devices"] = [entry("c0-p0", {"bitstream": "aes-v1", "sha256": SHA, "cacheHit": True})]
    apiserver.put_resource_claim(hit)
    apiserver.put_resource_claim(make_resource_claim("other", namespace="ml", driver="gpu.example.com", devices=[]))


def env_for(kubeconfig: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FPGA_AGENT_", "KUBERNETES_"))}
    env.update(HOME=str(home), KUBECONFIG=str(kubeconfig))
    return env


def test_claims_lists_what_each_claims_slot_holds(apiserver: Any, kubeconfig: Path, tmp_path: Path) -> None:
    put_claims(apiserver)
    done = run_fpga_agent(tmp_path, env_for(kubeconfig, tmp_path), "cluster", "--claims", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["claims"]
    assert rows == [
        {
            "claim": "ml/infer",
            "node": "node-a",
            "device": "c0-p0",
            "bitstream": "aes-v1",
            "sha256": SHA[:12],
            "loaded": "cache hit",
            "programmed": None,
            "ready": None,
        },
        {
            "claim": "ml/train",
            "node": "node-a",
            "device": "c0-p1",
            "bitstream": "aes-v1",
            "sha256": SHA[:12],
            "loaded": "programmed",
            "programmed": "2026-12-06T05:00:00Z",
            "ready": "Programmed=True",
        },
    ]
    table = run_fpga_agent(tmp_path, env_for(kubeconfig, tmp_path), "cluster", "--claims")
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["CLAIM", "NODE", "DEVICE", "BITSTREAM", "SHA256", "LOADED", "PROGRAMMED", "READY"]
    assert [line.split()[0] for line in lines] == ["ml/infer", "ml/train"]


def test_without_any_claim_data_it_says_so(apiserver: Any, kubeconfig: Path, tmp_path: Path) -> None:
    done = run_fpga_agent(tmp_path, env_for(kubeconfig, tmp_path), "cluster", "--claims")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "no claim carries data of fpga.example.com (0 claims)" in done.stderr

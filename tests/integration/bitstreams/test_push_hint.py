"""``catalog push`` to a registry that speaks plain HTTP, without --plain-http: one line that says what to do."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fakes import run_fpga_agent
from tests.integration.bitstreams.servers import Registry

PLATFORM_ID = "9a3d7c8e11114f0a8d1b0123456789ab"
ACCELERATOR_ID = "a5e0000000000000000000000000c0de"


def test_tls_to_a_plain_http_registry_hints_at_plain_http(tmp_path: Path, registry: Registry) -> None:
    image = tmp_path / "aes.bin"
    image.write_bytes(b"\x00bitstream\xff" * 100)
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    args = ["--name", "aes", "--platform", PLATFORM_ID, "--accelerator-id", ACCELERATOR_ID]
    result = run_fpga_agent(tmp_path, env, "catalog", "push", str(image), f"{registry.address}/fpga/aes:1", *args)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("fpga-agent catalog push: ")
    assert line.endswith("(the registry answers in plain HTTP, not TLS: give --plain-http)")
    assert not (registry.storage / "docker/registry/v2/repositories/fpga/aes").exists()

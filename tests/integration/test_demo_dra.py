"""``fpga-agent demo dra`` as a user runs it: its own process, the agent in DRA mode on simulated slots,
the kubelet's DRA side and the API server stand-ins, real unix sockets and real HTTP."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.fakes import run_fpga_agent

SLOTS = [f"simcard{c}-slot{s}" for c in range(2) for s in range(4)]


def demo_env(root: Path) -> dict[str, str]:
    """No FPGA_AGENT_* from outside but a short programming time; temporary files under ``root``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    env.update(FPGA_AGENT_SIM_PROGRAM_MS="10", FPGA_AGENT_LOG_LEVEL="info", TMPDIR=str(root / "tmp"))
    return env


def test_the_dra_demo_prepares_hits_the_cache_refuses_releases_and_follows_health(sock_dir: Path) -> None:
    (sock_dir / "tmp").mkdir()
    result = run_fpga_agent(sock_dir, demo_env(sock_dir), "demo", "dra")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    steps = [
        "it registers as DRA driver fpga.example.com",
        "GetInfo: type DRAPlugin, name fpga.example.com, versions v1.DRAPlugin, v1beta1.DRAPlugin",
        "the kubelet speaks v1.DRAPlugin",
        "no device plugin was registered",
        "ResourceSlice demo-node-fpga.example.com: driver fpga.example.com, node demo-node, pool demo-node",
        "NAME            PLATFORM   CARD      NUMA  BITSTREAM",
        "each of class fpga-slot-cached with the driver checked first",
        "claim default/aes-1 allocated simcard0-slot0 through fpga/any",
        "CDI device fpga.example.com/slot=",
        "device ",
        "-> /dev/fpga-sim/simcard0-slot0 (rw)",
        "env FPGA_SLOTS=simcard0-slot0",
        "Normal FpgaSlotProgrammed: Programmed slot simcard0-slot0 with aes-v1",
        "the slice now shows simcard0-slot0 with bitstream=aes-v1",
        "claim default/aes-1 released",
        "CDI spec exists: False; slot simcard0-slot0 held by nobody",
        "slot simcard0-slot0 still holds aes-v1",
        "claim default/aes-2 allocated simcard0-slot0 through fpga/cached",
        "Normal FpgaSlotCacheHit: Slot simcard0-slot0 already held aes-v1",
        "NodePrepareResources error: claim default/typo: bitstream 'aes-v9' is not in the catalog",
        "held by nobody, holds nothing; CDI spec exists: False",
        "Warning FpgaBitstreamRejected",
        "claim default/aes-2 released",
        "slot simcard0-slot0 held by nobody, holds aes-v1",
        "tainted fpga.example.com/unhealthy:NoSchedule in the slice",
        "no claim is allocated a tainted device",
        "untainted after",
        "registration socket exists: False; endpoint exists: False",
        "\n== done",
    ]
    positions = []
    at = 0
    for step in steps:
        at = out.find(step, at)
        positions.append(at)
        assert at >= 0, f"{step!r} missing after the earlier steps:\n{out}"
    # The slice lists every simulated slot, each empty and of the simulated platform, with only the attributes
    # claims select on.
    table = out.split("== 2.")[1].split("\n== 3.")[0]
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.startswith("simcard")}
    assert sorted(rows) == SLOTS
    assert all(r[0] == "sim-pr-v1" and r[-1] == "-" and len(r) == 4 for r in rows.values()), rows
    # Only the first claim programs: the cache hit's prepare programs nothing, the refused one nothing either.
    assert len(re.findall(r"programmed with \S+ in", result.stderr)) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert list((sock_dir / "tmp").iterdir()) == []  # the demo's temporary directory is gone

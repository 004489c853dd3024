"""A static slot programmed by a vendor tool, then a cache hit: the command programmer, narrated.

The real agent (static backend, one slot whose device node is /dev/null) runs in this
process against the kubelet stand-in over real unix sockets, in a temporary directory.
The slot's programmer is the XRT recipe of docs/command-programmer.md with the stand-in
``xbutil`` of daemonset/examples/command-programmer, whose "card" is a directory. Needs no
root, no cluster and no FPGA. Run it with ``scripts/command-programmer-demo``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.app import Agent  # noqa: E402
from agent.config import load_config  # noqa: E402
from agent.demo.kubelet.devicemanager import KubeletStandIn  # noqa: E402
from agent.demo.kubelet.nodepods import NodePods  # noqa: E402
from agent.deviceplugin.constants import RESOURCE_NAME  # noqa: E402
from agent.node.reconfigure import ANNOTATION  # noqa: E402
from agent.programming.catalog import Catalog  # noqa: E402

TOOLS = ROOT / "daemonset" / "examples" / "command-programmer"
PLATFORM = "xilinx_u250_gen3x16_xdma_shell_4_1"
ACCELERATOR = "8e2c4a5f-1b3d-4c6e-9f01-23456789abcd"
WAIT_S = 10.0


def say(text: str) -> None:
    print(text, flush=True)


def show_events(pods: NodePods, pod: str) -> None:
    for event in pods.events:
        if event.pod == pod:
            say(f"   event {event.type} {event.reason}: {event.message}")


def show_calls(card: Path, seen: int) -> int:
    calls = (card / "calls").read_text().splitlines() if (card / "calls").exists() else []
    for call in calls[seen:]:
        say(f"   tool ran: {call}")
    if len(calls) == seen:
        say("   tool ran: nothing")
    return len(calls)


async def demo(root: Path) -> None:
    card = root / "card"
    xbutil = str(TOOLS / "xbutil")
    slots = [{"card": "alveo-e5", "region": "user", "devices": ["/dev/null"], "platform": PLATFORM,
              "control-node": "0000:e5:00.1"}]  # fmt: skip
    programmers = [
        {
            "platform": PLATFORM,
            "program": [xbutil, "program", "--device", "{control_node}", "--user", "{image}"],
            "read-back": [xbutil, "examine", "--device", "{control_node}", "--report", "dynamic-regions"],
            "read-back-pattern": r"Xclbin UUID:\s*([0-9a-fA-F-]{36})",
            "environment": {"FAKE_FPGA_DIR": str(card)},
        }
    ]
    flags = {
        "backend": "static",
        "static_slots": json.dumps(slots),
        "command_programmers": json.dumps(programmers),
        "device_plugin_dir": str(root / "device-plugins"),
        "pod_resources_socket": str(root / "pod-resources" / "kubelet.sock"),
        "state_dir": str(root / "state"),
        "bitstream_dir": str(root / "bitstreams"),
        "health_listen": "",
        "node_name": "demo-node",
    }
    config = load_config(flags, env={})
    catalog = Catalog(config.bitstream_dir)
    image = root / "vadd.xclbin"
    image.write_bytes(f"xclbin2 uuid={ACCELERATOR}\n".encode() + bytes(range(256)) * 64)
    catalog.add(image, "vadd", platform=PLATFORM, accelerator_id=ACCELERATOR)
    pods = NodePods()
    kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket, pods)
    await kubelet.start()
    stop = asyncio.Event()
    agent = Agent(config, catalog=catalog, pods=pods, events=pods)
    task = asyncio.create_task(agent.run(stop), name="agent")
    try:
        say("== 1. The agent starts: one static slot, its programmer the XRT recipe (stand-in xbutil)")
        await kubelet.wait_registered(1, WAIT_S)
        conn = kubelet.plugins[RESOURCE_NAME]
        await kubelet.wait_for(lambda: len(conn.healthy()) == 1, WAIT_S)
        say(f"   the kubelet sees {sorted(conn.devices)}; the read-back at start:")
        seen = show_calls(card, 0)

        say("== 2. A pod asks for vadd: the tool programs the catalog's file, the read-back confirms it")
        await kubelet.admit("default", "vadd-1", "main", RESOURCE_NAME, 1, {ANNOTATION: "vadd"})
        seen = show_calls(card, seen)
        show_events(pods, "vadd-1")

        say("== 3. The pod ends; the next pod asks for vadd: a cache hit, no tool runs")
        kubelet.delete_pod("default", "vadd-1")
        await kubelet.admit("default", "vadd-2", "main", RESOURCE_NAME, 1, {ANNOTATION: "vadd"})
        seen = show_calls(card, seen)
        show_events(pods, "vadd-2")

        say("== 4. The tool fails (another bitstream, the card refuses): its message reaches the pod's Event")
        kubelet.delete_pod("default", "vadd-2")
        catalog.add(image, "vadd-copy", platform=PLATFORM, accelerator_id="0" * 31 + "1")
        (card / "behaviour").write_text("fail")
        try:
            await kubelet.admit("default", "other", "main", RESOURCE_NAME, 1, {ANNOTATION: "vadd-copy"})
        except grpc.aio.AioRpcError as exc:
            say(f"   PreStartContainer -> {exc.code().name}")
        show_calls(card, seen)
        show_events(pods, "other")
        (card / "behaviour").write_text("ok")
    finally:
        stop.set()
        await task
        await kubelet.stop()
    say("done")


def main() -> None:
    logging.disable(logging.ERROR)  # the narration says what matters; the agent's own log lines would repeat it
    with tempfile.TemporaryDirectory(prefix="fpga-slot-cmd-demo-") as tmp:
        asyncio.run(demo(Path(tmp)))


if __name__ == "__main__":
    main()

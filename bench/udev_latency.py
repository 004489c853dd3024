"""udev event to ListAndWatch latency, through real libudev (umockdev) and real sockets.

A real agent (dfl backend) runs against the kubelet stand-in over a fake two-card
DFL tree; each round flips one port's afu_id between a valid id and all ones and
sends a 'change' uevent, then waits until the stand-in's ListAndWatch stream shows
the port with the expected health. Prints p50/p99/max over N events.

Usage: python bench/udev_latency.py [--events 1000]
(re-executes itself under umockdev-wrapper when needed)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if "libumockdev-preload" not in os.environ.get("LD_PRELOAD", ""):
    wrapper = shutil.which("umockdev-wrapper")
    if wrapper is None:
        raise SystemExit("umockdev-wrapper not found: run scripts/setup (installs Debian's umockdev)")
    os.execv(wrapper, [wrapper, sys.executable, *sys.argv])
sys.path.insert(0, str(ROOT))

from agent.app import Agent  # noqa: E402
from agent.demo.kubelet.devicemanager import KubeletStandIn  # noqa: E402
from agent.deviceplugin.constants import RESOURCE_NAME  # noqa: E402
from bench.table import emit, p50_p99  # noqa: E402
from tests.fakes import test_config  # noqa: E402
from tests.udevbed import ALL_ONES, UdevTestbed, two_dfl_cards  # noqa: E402


async def measure(events: int) -> list[float]:
    bed = UdevTestbed()
    root = Path(tempfile.mkdtemp(prefix="fs-udev-", dir="/tmp"))
    try:
        cards = two_dfl_cards()
        for card in cards:
            bed.add(card.record())
        config = test_config(root, backend="dfl")
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        stop = asyncio.Event()
        task = asyncio.create_task(Agent(config).run(stop))
        try:
            await kubelet.wait_registered(1, 10)
            conn = kubelet.plugins[RESOURCE_NAME]
            await kubelet.wait_for(lambda: len(conn.devices) == 5, 10)
            card = cards[0]
            path, slot_id = card.port_path(card.port_indexes[0]), card.slot_id(0)
            samples = []
            for i in range(events):
                crashed = i % 2 == 0
                expected = "Unhealthy" if crashed else "Healthy"
                bed.set_attribute(path, "afu_id", ALL_ONES if crashed else card.afu_ids[0])
                started = time.perf_counter()
                bed.uevent(path, "change")
                await kubelet.wait_for(lambda e=expected: conn.devices[slot_id].health == e, 5)
                samples.append((time.perf_counter() - started) * 1000)
            return samples
        finally:
            stop.set()
            await task
            await kubelet.stop()
    finally:
        bed.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="udev event to ListAndWatch latency")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    args = parser.parse_args()
    samples = asyncio.run(measure(args.events))
    row = (f"udev event to ListAndWatch ({len(samples)} events)", p50_p99(samples, digits=2), "p99 <= 50 ms")
    emit([row], args.json)


if __name__ == "__main__":
    main()

"""From a pod's binding to its bitstream being on the node: the early pull, end to end through the agent.

A real ``fpga-agent`` (in this process: ``Agent`` with API access from a kubeconfig)
watches the fake API server's pods and FpgaBitstream objects; a CNCF distribution
registry (Debian's docker-registry) on a free local port holds the artifacts, pushed
as ``catalog push`` pushes them; the kubelet stand-in starts the containers over real
unix sockets. For each run, a new bitstream of ``--mb`` MB is pushed and declared,
then a pod that asks for it is bound to the node (``spec.nodeName`` set, as the
scheduler's binding does): the time until the file is in the node's catalog is the
bind-to-file time. The kubelet then admits the pod (Allocate, PreStartContainer):
PreStartContainer finds the file there and only programs. On a real node the kubelet
takes its own time between binding and PreStartContainer (sandbox, image, volumes);
the pull runs during it.

Usage: python bench/early_pull.py [--mb 4,64] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from agent.app import Agent, connect_kube  # noqa: E402
from agent.bitstreams.declaration import declaration_object  # noqa: E402
from agent.deviceplugin.constants import RESOURCE_NAME  # noqa: E402
from agent.node.reconfigure import ANNOTATION  # noqa: E402
from agent.programming.catalog import Catalog  # noqa: E402
from agent.simfpga.fabric import PLATFORM  # noqa: E402
from bench.table import Row, emit  # noqa: E402
from tests.fakeapi import DEFAULT_NODE, running_apiserver  # noqa: E402
from tests.fakes import KubeletStandIn, short_tmpdir, test_config  # noqa: E402
from tests.integration.bitstreams.servers import running_registry  # noqa: E402
from tests.integration.reconfigure.support import push_artifact  # noqa: E402

WAIT_S = 120.0
POLL_S = 0.002


def declared(agent: Agent, name: str) -> bool:
    return agent.distribution is not None and agent.distribution.puller.declared(name) is not None


def in_catalog(catalog: Catalog, name: str) -> bool:
    return any(entry.name == name for entry in catalog.list())


async def wait(check: object, what: str) -> float:
    """Poll ``check`` (the catalog on disk); the time it first held."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return time.perf_counter()
        await asyncio.sleep(POLL_S)
    raise SystemExit(f"no {what} within {WAIT_S:.0f} s")


async def measure(sizes_mb: list[int], runs: int) -> dict[int, tuple[list[float], list[float]]]:
    results: dict[int, tuple[list[float], list[float]]] = {}
    with short_tmpdir() as root, running_apiserver() as api, running_registry(root) as registry:
        api.add_node(DEFAULT_NODE)
        catalog = Catalog(root / "catalog")
        config = dataclasses.replace(
            test_config(root, node_name=DEFAULT_NODE, sim_cards=4, sim_slots_per_card=4, sim_program_ms=0),
            kubeconfig=api.write_kubeconfig(root / "kubeconfig"),
            bitstream_plain_http=(registry.address,),
            bitstream_cache_bytes=8 << 30,
        )
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        agent = Agent(config, catalog=catalog, kube=connect_kube(config))
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        sources = root / "pushed"
        sources.mkdir()
        try:
            await kubelet.wait_registered(1, WAIT_S)
            async with aiohttp.ClientSession() as session:
                for size in sizes_mb:
                    to_file, start = [], []
                    for run in range(runs):
                        name = f"early-{size}mb-{run}"
                        path = sources / f"{name}.bin"
                        path.write_bytes(os.urandom(size << 20))
                        declaration = await push_artifact(session, registry, path, name, PLATFORM)
                        api.put_fpga_bitstream(declaration_object(declaration))
                        await wait(lambda n=name: declared(agent, n), "the declaration at the agent")
                        bound = time.perf_counter()
                        api.add_pod(name, annotations={ANNOTATION: name})  # bound to the node at once
                        present = await wait(lambda n=name: in_catalog(catalog, n), f"file {name}")
                        admitted = time.perf_counter()
                        await kubelet.admit("default", name, "main", RESOURCE_NAME, 1)
                        started = time.perf_counter()
                        to_file.append(present - bound)
                        start.append(started - admitted)
                    results[size] = (to_file, start)
        finally:
            stop.set()
            await asyncio.wait_for(task, WAIT_S)
            await kubelet.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="4,64", help="bitstream sizes in MB")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one machine-readable line (for bench/run)")
    args = parser.parse_args()
    sizes = [int(mb) for mb in args.mb.split(",")]
    results = asyncio.run(measure(sizes, args.runs))
    rows: list[Row] = []
    for size, (to_file, start) in results.items():
        rows.append(
            (
                f"{size} MB: pod bound -> file in the catalog (early pull), median (runs)",
                f"{statistics.median(to_file) * 1000:.0f} ms ({' '.join(f'{t * 1000:.0f}' for t in to_file)})",
                "",
            )
        )
        rows.append(
            (
                f"{size} MB: Allocate + PreStartContainer once the file is there, median",
                f"{statistics.median(start) * 1000:.0f} ms",
                "",
            )
        )
    emit(rows, as_json=args.json)


if __name__ == "__main__":
    main()

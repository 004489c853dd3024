"""Cache-aware placement at 5000 nodes with the real kube-scheduler: how often a pod lands where its bitstream is.

On the bench control plane of the bundled Kubernetes (``../shared/k8s``, ``bench-cp.sh``:
an API server with 5000 kubelet-less nodes of 4 ``example.com/fpga-slot`` each), every
node's slots are published as its agent would (``bench/placement_state.py``: free slots
holding bitstreams of a Zipf law, a popular one on hundreds of nodes, a rare one on a
handful), and the real kube-scheduler places a backlog of pods with the shipped
fpga-scheduler profile in both modes:

* ``extender``: daemonset/scheduler-config.yaml with ``fpga-agent extender`` (prioritize,
  names only) watching the FpgaNodeStates; pods ask ``example.com/fpga-slot: 1`` and name
  their bitstream in the annotation. As each pod is bound, its node's FpgaNodeState is
  republished with the slot taken, as the node's agent would;
* ``dra``: daemonset/dra-mode/scheduler-config.yaml (which asks the same extender), a
  ResourceSlice per node, each pod with its own claim in the cache-aware form of
  daemonset/examples/dra/cached-first.yaml and its node selector; the node's FpgaNodeState
  is published and republished as in ``extender`` (a DRA-mode agent publishes it too).

For each pod, in the order of the binds: did some node have a free slot holding its
bitstream, and did the pod land on such a node. The hit rate is the share of the pods
that could have hit that did. Pods/s from the first bind to the last, as
``bench/scheduler.py``; this machine is shared, so throughput is noisy (rounds and spread
are printed). ``--percentage`` sets the profiles' percentageOfNodesToScore instead of the
shipped value, to compare settings.

Needs root (the bench control plane, stopped afterwards unless it was up before). Usage:
    python bench/placement_scale.py [--pods 2000] [--modes extender,dra] [--rounds 1] [--percentage N]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import dra_sched  # noqa: E402
from bench.dra_shapes import shipped_claim, shipped_classes, shipped_node_selector  # noqa: E402
from bench.placement_run import (  # noqa: E402
    BindCounter,
    Publisher,
    backlog_run,
    clear_namespace,
    ensure_namespace,
    ensure_node_states,
)
from bench.placement_state import ClusterState, wanted  # noqa: E402
from bench.procs import exit_on_sigterm  # noqa: E402
from bench.scheduler import (  # noqa: E402
    BENCH_KUBECONFIG,
    K8S,
    RIG,
    bench_control_plane,
    dra_scheduler_config,
    port_free,
    scheduler_config,
    started,
)

EXTENDER_PORT = 18890
NAMESPACE = "bench-place"


@dataclass
class Mode:
    name: str
    rates: list[float] = field(default_factory=list)
    pods_per_s: list[float] = field(default_factory=list)


def extender_config(percentage: int | None, strategy: str | None = None) -> str:
    """The shipped profile for the bench (plain HTTP), with ``percentage`` and the slots' scoring ``strategy``
    (MostAllocated, LeastAllocated) if given."""
    config: dict[str, Any] = yaml.safe_load(scheduler_config(f"http://127.0.0.1:{EXTENDER_PORT}"))
    if strategy is not None:
        (profile,) = config["profiles"]
        for plugin in profile.get("pluginConfig", []):
            if plugin["name"] == "NodeResourcesFit":
                plugin["args"]["scoringStrategy"]["type"] = strategy
    config["clientConnection"]["kubeconfig"] = str(BENCH_KUBECONFIG)
    return _with_percentage(config, percentage)


def dra_config(percentage: int | None) -> str:
    return _with_percentage(yaml.safe_load(dra_scheduler_config(None, f"http://127.0.0.1:{EXTENDER_PORT}")), percentage)


def _with_percentage(config: dict[str, Any], percentage: int | None) -> str:
    if percentage is not None:
        (profile,) = config["profiles"]
        profile["percentageOfNodesToScore"] = percentage
    return yaml.safe_dump(config, sort_keys=False)


def extender_pod(name: str, bitstream: str) -> dict[str, Any]:
    slot = {"example.com/fpga-slot": "1"}
    container = {
        "name": "c",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "10m", "memory": "10Mi", **slot}, "limits": slot},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"example.com/fpga-bitstream": bitstream}},
        "spec": {"automountServiceAccountToken": False, "containers": [container]},
    }


def run_mode(
    mode: str, api: dra_sched.Api, names: list[str], args: argparse.Namespace, config: Path, log: Path
) -> tuple[float, float]:
    """One backlog run of ``mode`` from the initial state: (hit rate, pods/s)."""
    state = ClusterState.make(names, args.bitstreams, args.zipf, args.empty_share, args.seed)
    pods = args.pods
    names_wanted = wanted(pods, args.bitstreams, args.zipf, args.seed)
    bitstreams = {f"p-{i:06d}": bitstream for i, bitstream in enumerate(names_wanted)}
    scheduler = [str(RIG / "bin" / "kube-scheduler"), f"--config={config}", "--secure-port=0", "--v=1"]
    if mode == "extender":
        with Publisher(api, state, names) as publisher:
            publisher.publish_all()  # the initial state (and the previous round's changes undone)
            counter = BindCounter(state, bitstreams, publisher.changed, publisher.lock)
            rate = backlog_run(api, NAMESPACE, bitstreams, extender_pod, None, counter, scheduler, log)
    else:  # a DRA-mode agent publishes its slot state too (the extender scores DRA pods by it), besides the slice
        pod = functools.partial(dra_sched.pod_body, node_selector=shipped_node_selector())
        with Publisher(api, state, names) as publisher:
            publisher.publish_all()
            counter = BindCounter(state, bitstreams, publisher.changed, publisher.lock)
            rate = backlog_run(api, NAMESPACE, bitstreams, pod, shipped_claim, counter, scheduler, log)
    tally = state.tally
    print(
        f"  {mode}: {tally.hits}/{tally.possible} hits ({tally.pods} pods; misses on a node whose copy an earlier "
        f"pod took: {tally.taken_before}), {rate:.1f} pods/s",
        file=sys.stderr,
        flush=True,
    )
    return tally.rate, rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--modes", default="extender,dra", help="extender, dra, or both (comma-separated)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each mode, interleaved")
    parser.add_argument("--bitstreams", type=int, default=200, help="catalog size (Zipf popularity)")
    parser.add_argument("--zipf", type=float, default=1.0, help="popularity exponent of the pods and the slots")
    parser.add_argument("--empty-share", type=float, default=0.2, help="share of slots holding nothing")
    parser.add_argument("--percentage", type=int, default=None, help="percentageOfNodesToScore for both profiles")
    parser.add_argument(
        "--strategy",
        choices=("MostAllocated", "LeastAllocated"),
        default=None,
        help="NodeResourcesFit's scoring of the slots in the extender profile instead of the shipped one",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    exit_on_sigterm()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("extender", "dra") for m in modes):
        raise SystemExit(f"--modes: {args.modes!r}: name extender, dra or both")
    if args.percentage is not None and not 0 <= args.percentage <= 100:
        raise SystemExit(f"--percentage: {args.percentage}: must be 0..100")
    if os.geteuid() != 0 or not (K8S / "scripts" / "bench-cp.sh").exists():
        raise SystemExit(f"needs root and the bundled Kubernetes at {K8S} (FPGA_SLOT_K8S)")
    if not port_free(EXTENDER_PORT):
        raise SystemExit(f"port {EXTENDER_PORT} on 127.0.0.1 is taken")
    with bench_control_plane():
        results, nodes = measure(args, modes)
    for mode in results.values():
        rates = " ".join(f"{r:.3f}" for r in mode.rates)
        speeds = " ".join(f"{s:.1f}" for s in mode.pods_per_s)
        print(f"{mode.name}: hit rate per round {rates}; pods/s per round {speeds}")
    extender, dra = results.get("extender"), results.get("dra")
    print(
        f"placement hit rate extender {_median(extender, 'rates', 2)} dra {_median(dra, 'rates', 2)} "
        f"(pods {args.pods}, nodes {nodes}, "
        f"pods/s extender {_median(extender, 'pods_per_s', 0)} dra {_median(dra, 'pods_per_s', 0)})"
    )
    return 0


def _median(mode: Mode | None, what: str, digits: int) -> str:
    if mode is None:
        return "-"
    return f"{statistics.median(getattr(mode, what)):.{digits}f}"


def measure(args: argparse.Namespace, modes: list[str]) -> tuple[dict[str, Mode], int]:
    """Every mode, interleaved round by round; the results and the number of nodes."""
    api = dra_sched.Api(RIG / "pki")
    names = fake_nodes(api)
    ensure_namespace(api, NAMESPACE)
    ensure_node_states(api)
    results = {mode: Mode(mode) for mode in modes}
    with tempfile.TemporaryDirectory(prefix="fpga-slot-place-") as tmp:
        work = Path(tmp)
        configs = {"extender": work / "extender.yaml", "dra": work / "dra.yaml"}
        configs["extender"].write_text(extender_config(args.percentage, args.strategy))
        configs["dra"].write_text(dra_config(args.percentage))
        if "dra" in modes:
            publish_slices(api, names, args)
        agent = [str(ROOT / ".venv" / "bin" / "fpga-agent"), "extender", "--kubeconfig", str(BENCH_KUBECONFIG)]
        with started(
            [*agent, "--listen", f"127.0.0.1:{EXTENDER_PORT}", "--log-level", "warning"],
            f"http://127.0.0.1:{EXTENDER_PORT}/healthz",
            work / "extender.log",
        ):
            for round_index in range(args.rounds):
                print(f"round {round_index + 1}/{args.rounds} ({args.pods} pods per run)", file=sys.stderr)
                order = modes if round_index % 2 == 0 else modes[::-1]
                for mode in order:
                    rate, speed = run_mode(mode, api, names, args, configs[mode], work / f"{mode}-scheduler.log")
                    results[mode].rates.append(rate)
                    results[mode].pods_per_s.append(speed)
        clear_namespace(api, NAMESPACE)
    return results, len(names)


def fake_nodes(api: dra_sched.Api) -> list[str]:
    _, nodes = api.call("GET", "/api/v1/nodes?labelSelector=rig.example.com%2Ffake%3Dtrue")
    return sorted(n["metadata"]["name"] for n in nodes["items"])


def publish_slices(api: dra_sched.Api, names: list[str], args: argparse.Namespace) -> None:
    """The DeviceClasses and every node's slice of the initial state (replacing the bench's own, if any)."""
    state = ClusterState.make(names, args.bitstreams, args.zipf, args.empty_share, args.seed)
    for device_class in shipped_classes():
        dra_sched.put(api, f"{dra_sched.RESOURCE}/deviceclasses", device_class)
    slices = f"{dra_sched.RESOURCE}/resourceslices"

    def put(node: str) -> None:
        dra_sched.put(api, slices, state.slice_body(node))

    dra_sched.in_parallel(names, put)
    dra_sched.label_platform(api, names)  # the example pod's node selector names it
    print(f"DRA: a ResourceSlice on each of {len(names)} nodes", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

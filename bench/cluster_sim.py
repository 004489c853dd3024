"""Cluster simulation: how many reconfigurations each placement policy costs.

Discrete-event and deterministic for a seed. N nodes x M slots; pods arrive as a
Poisson process, each wants one bitstream (Zipf popularity) in 1 or 2 slots of one
node for an exponentially distributed time. Programming a slot takes the
bitstream's size divided by the configuration bandwidth. A pod that fits nowhere
waits (FIFO) until slots free up.

Policies, side by side on the same pod sequence:

  (a) spread+first-fit   kube-scheduler's spreading (most free slots), first free slots on the node
  (b) spread+ours        the same placement, slots chosen by the agent's policy (agent.slots.choose_preferred)
  (c) extender+ours      the fpga-scheduler profile of daemonset/scheduler-config.yaml: NodeResourcesFit
                         MostAllocated for example.com/fpga-slot plus the extender's score
                         (agent.extender.scoring, with the configured weight), slots by the agent's policy
  (c') same, spreading   (c) on a profile that keeps the default spreading, to show what packing adds
  (d) oracle             offline and clairvoyant: any node, a slot already holding the bitstream if one
                         is free, else evict the bitstream used again farthest in the future (Belady)

plus the cold-miss lower bound (every slot that runs a bitstream at some moment must
have been programmed with it once: the sum over bitstreams of their peak concurrent
slots). Policies (b) and (c) import the project's real code, nothing is re-written.

Usage: python bench/cluster_sim.py [--nodes 100 --slots 4 --bitstreams 40 --zipf 1.1 --pods 20000 ...]
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.extender.nodestate import NodeSlots, PublishedSlot  # noqa: E402
from agent.extender.scoring import ContainerDemand, PodDemand, ScoreWeights, score_node  # noqa: E402
from agent.slots import DeviceNode, Health, Holder, Slot, SlotId, SlotState, choose_preferred  # noqa: E402
from agent.slots.registry import Content  # noqa: E402

PLATFORM = "sim-pr-v1"


# ------------------------------------------------------------------ workload
@dataclass(frozen=True, slots=True)
class Pod:
    index: int
    arrival: float
    bitstream: int
    slots: int
    duration: float


@dataclass(frozen=True, slots=True)
class Workload:
    pods: list[Pod]
    sizes_mb: list[float]
    uses: list[list[float]]  # per bitstream: sorted arrival times (for the oracle)


def zipf_weights(n: int, s: float) -> list[float]:
    raw = [1.0 / (rank**s) for rank in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def make_workload(args: argparse.Namespace) -> Workload:
    rng = random.Random(args.seed)
    weights = zipf_weights(args.bitstreams, args.zipf)
    mean_slots = 1 + args.two_slot_share
    rate = args.load * args.nodes * args.slots / (mean_slots * args.mean_duration_s)
    sizes = [rng.uniform(args.size_min_mb, args.size_max_mb) for _ in range(args.bitstreams)]
    pods, now = [], 0.0
    uses: list[list[float]] = [[] for _ in range(args.bitstreams)]
    for index in range(args.pods):
        now += rng.expovariate(rate)
        bitstream = rng.choices(range(args.bitstreams), weights)[0]
        slots = 2 if rng.random() < args.two_slot_share else 1
        pods.append(Pod(index, now, bitstream, slots, rng.expovariate(1 / args.mean_duration_s)))
        uses[bitstream].append(now)
    return Workload(pods, sizes, uses)


def cold_miss_bound(workload: Workload) -> int:
    """Sum over bitstreams of the peak number of slots running it at once (unconstrained start)."""
    peak = 0
    for bitstream in range(len(workload.sizes_mb)):
        edges = []
        for pod in workload.pods:
            if pod.bitstream == bitstream:
                edges += [(pod.arrival, pod.slots), (pod.arrival + pod.duration, -pod.slots)]
        running = best = 0
        for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):
            running += delta
            best = max(best, running)
        peak += best
    return peak


# ---------------------------------------------------------------- the cluster
@dataclass(slots=True)
class SimSlot:
    bitstream: int | None = None
    holder: int | None = None
    last_used: float = 0.0


@dataclass(slots=True)
class SimNode:
    name: str
    slots: list[SimSlot]
    cached: NodeSlots | None = None

    def free(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.holder is None]


def accelerator(bitstream: int) -> str:
    return f"accel-{bitstream:03d}"


def bitstream_name(bitstream: int) -> str:
    return f"bs-{bitstream:03d}"


def published(node: SimNode, catalog: dict[str, str]) -> NodeSlots:
    """What the node's agent would publish, parsed as the extender parses it (cached per change)."""
    if node.cached is None:
        slots = tuple(
            PublishedSlot(
                id=f"{node.name}-slot{i}",
                card=node.name,
                numa=0,
                platform=PLATFORM,
                bitstream=None if s.bitstream is None else bitstream_name(s.bitstream),
                accelerator=None if s.bitstream is None else accelerator(s.bitstream),
                free=s.holder is None,
                healthy=True,
                last_used=int(s.last_used) if s.last_used else None,
            )
            for i, s in enumerate(node.slots)
        )
        node.cached = NodeSlots.build(node.name, "1", slots, catalog)
    return node.cached


def slot_states(node: SimNode, epoch: float, now: float) -> dict[str, SlotState]:
    """The node's slots as the agent's registry would hold them."""
    states = {}
    for i, s in enumerate(node.slots):
        slot_id = SlotId(f"{node.name}-slot{i}")
        slot = Slot(
            id=slot_id,
            card=node.name,
            region=f"slot{i}",
            numa=0,
            device_nodes=(DeviceNode("/dev/null", "/dev/null"),),
            platform=PLATFORM,
            loaded=None if s.bitstream is None else accelerator(s.bitstream),
            health=Health.HEALTHY,
            backend="sim",
        )
        content = None if s.bitstream is None else Content(bitstream_name(s.bitstream), accelerator(s.bitstream))
        holder = None if s.holder is None else Holder(allocated_at=epoch + now)
        states[slot_id] = SlotState(slot, holder, epoch + s.last_used if s.last_used else None, True, content)
    return states


Placement = Callable[[list[SimNode], Pod, float], tuple[SimNode, list[int]] | None]


def node_resources_fit(
    rng: random.Random, most_allocated: bool
) -> Callable[[list[SimNode], Pod], list[tuple[float, SimNode]]]:
    """kube-scheduler's NodeResourcesFit score over feasible nodes (0..100).

    LeastAllocated (spreading, the default) favours nodes with many free slots;
    MostAllocated for example.com/fpga-slot (the fpga-scheduler profile) packs pods,
    which keeps the free slots of other nodes, and what they hold, for later pods.
    """

    def score(nodes: list[SimNode], pod: Pod) -> list[tuple[float, SimNode]]:
        out = []
        for node in nodes:
            free = sum(1 for s in node.slots if s.holder is None)
            if free >= pod.slots:
                share = 100.0 * free / len(node.slots)
                out.append(((100.0 - share if most_allocated else share) + rng.random() * 1e-3, node))
        return out

    return score


def first_fit(node: SimNode, pod: Pod, now: float) -> list[int]:
    return node.free()[: pod.slots]


def ours(epoch: float) -> Callable[[SimNode, Pod, float], list[int]]:
    def choose(node: SimNode, pod: Pod, now: float) -> list[int]:
        states = slot_states(node, epoch, now)
        available = [sid for sid, st in states.items() if st.holder is None]
        chosen = choose_preferred(states, available, [], pod.slots, accelerator(pod.bitstream))
        return [int(sid.rsplit("slot", 1)[1]) for sid in chosen]

    return choose


def scheduler(
    rng: random.Random,
    choose_slots: Callable[[SimNode, Pod, float], list[int]],
    extender: tuple[ScoreWeights, int, dict[str, str], float] | None,
    most_allocated: bool = False,
) -> Placement:
    """NodeResourcesFit scoring, plus the extender's (0..10 x 10 x weight) when two or more nodes fit."""
    base = node_resources_fit(rng, most_allocated)

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        scored = base(nodes, pod)
        if not scored:
            return None
        if extender is not None and len(scored) >= 2:
            weights, weight, catalog, epoch = extender
            demand = PodDemand.of(f"p{pod.index}", [ContainerDemand("main", pod.slots, bitstream_name(pod.bitstream))])
            scored = [
                (s + 10.0 * weight * score_node(demand, published(n, catalog), weights, epoch + now), n)
                for s, n in scored
            ]
        node = max(scored, key=lambda pair: pair[0])[1]
        return node, choose_slots(node, pod, now)

    return place


def oracle(workload: Workload) -> Placement:
    """Clairvoyant: hits anywhere first, else evict the bitstream used again farthest in the future."""

    def next_use(bitstream: int | None, now: float) -> float:
        if bitstream is None:
            return math.inf
        times = workload.uses[bitstream]
        i = bisect.bisect_right(times, now)
        return times[i] if i < len(times) else math.inf

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        best: tuple[tuple[int, float], SimNode, list[int]] | None = None
        for node in nodes:
            free = node.free()
            if len(free) < pod.slots:
                continue
            hits = [i for i in free if node.slots[i].bitstream == pod.bitstream]
            rest = sorted(
                (i for i in free if node.slots[i].bitstream != pod.bitstream),
                key=lambda i: -next_use(node.slots[i].bitstream, now),
            )
            chosen = (hits + rest)[: pod.slots]
            misses = [i for i in chosen if node.slots[i].bitstream != pod.bitstream]
            farthest = min((next_use(node.slots[i].bitstream, now) for i in misses), default=math.inf)
            key = (-len(misses), farthest, -len(free))  # ties: pack, as the best online policy does
            if best is None or key > best[0]:
                best = (key, node, chosen)
        return None if best is None else (best[1], best[2])

    return place


# ----------------------------------------------------------------- the engine
@dataclass(slots=True)
class Result:
    reconfigurations: int = 0
    reconfiguration_s: float = 0.0
    delays: list[float] = field(default_factory=list)
    busy_slot_s: float = 0.0
    end: float = 0.0


def simulate(workload: Workload, nodes_n: int, slots_n: int, bandwidth: float, place: Placement) -> Result:
    nodes = [SimNode(f"node{n:03d}", [SimSlot() for _ in range(slots_n)]) for n in range(nodes_n)]
    result = Result()
    events: list[tuple[float, int, int, int]] = []  # (time, order, kind 0=leave 1=arrive, pod)
    for pod in workload.pods:
        heapq.heappush(events, (pod.arrival, 1, 1, pod.index))
    running: dict[int, tuple[SimNode, list[int]]] = {}
    waiting: list[Pod] = []
    horizon = workload.pods[-1].arrival
    order = 2

    def start(pod: Pod, now: float) -> bool:
        nonlocal order
        where = place(nodes, pod, now)
        if where is None:
            return False
        node, chosen = where
        programming = 0.0
        for i in chosen:
            slot = node.slots[i]
            if slot.bitstream != pod.bitstream:
                result.reconfigurations += 1
                programming += workload.sizes_mb[pod.bitstream] / bandwidth
                slot.bitstream = pod.bitstream
            slot.holder = pod.index
            slot.last_used = now
        node.cached = None
        result.reconfiguration_s += programming
        result.delays.append(now - pod.arrival + programming)
        end = now + programming + pod.duration
        # Utilisation is measured while pods keep arriving, not over the drain at the end.
        result.busy_slot_s += max(0.0, min(end, horizon) - now) * len(chosen)
        running[pod.index] = (node, chosen)
        heapq.heappush(events, (end, order, 0, pod.index))
        order += 1
        return True

    while events:
        now, _, kind, index = heapq.heappop(events)
        result.end = now
        if kind == 1:
            pod = workload.pods[index]
            if waiting or not start(pod, now):
                waiting.append(pod)
            continue
        node, chosen = running.pop(index)
        for i in chosen:
            node.slots[i].holder = None
            node.slots[i].last_used = now
        node.cached = None
        still = []
        for pod in waiting:
            if still or not start(pod, now):
                still.append(pod)
        waiting = still
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def profile_settings(path: Path) -> tuple[int, bool]:
    """The extender weight and whether FPGA slots are packed (MostAllocated), as shipped."""
    config = yaml.safe_load(path.read_text())
    (extender,) = config["extenders"]
    (profile,) = config["profiles"]
    most_allocated = any(
        plugin["name"] == "NodeResourcesFit"
        and plugin["args"]["scoringStrategy"]["type"] == "MostAllocated"
        and any(r["name"] == "example.com/fpga-slot" for r in plugin["args"]["scoringStrategy"]["resources"])
        for plugin in profile.get("pluginConfig", [])
    )
    return int(extender["weight"]), most_allocated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--slots", type=int, default=4, help="slots per node")
    parser.add_argument("--bitstreams", type=int, default=40)
    parser.add_argument("--zipf", type=float, default=1.1, help="popularity exponent s")
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--load", type=float, default=0.7, help="offered load: busy slots / all slots")
    parser.add_argument("--mean-duration-s", type=float, default=300.0)
    parser.add_argument("--two-slot-share", type=float, default=0.3, help="share of pods asking for 2 slots")
    parser.add_argument("--size-min-mb", type=float, default=20.0)
    parser.add_argument("--size-max-mb", type=float, default=80.0)
    parser.add_argument("--bandwidth-mb-s", type=float, default=100.0, help="configuration bandwidth")
    parser.add_argument(
        "--scheduler-config",
        type=Path,
        default=ROOT / "daemonset" / "scheduler-config.yaml",
        help="where (c) takes the extender weight and the slot scoring strategy from",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    started = time.monotonic()
    weight, packs = profile_settings(args.scheduler_config)
    workload = make_workload(args)
    catalog = {bitstream_name(b): PLATFORM for b in range(args.bitstreams)}
    epoch = 1_700_000_000.0  # wall-clock origin for last-used times (LRU ages)
    policies: dict[str, Placement] = {
        "(a) spread+first-fit": scheduler(random.Random(args.seed + 1), first_fit, None),
        "(b) spread+ours": scheduler(random.Random(args.seed + 1), ours(epoch), None),
        "(c) extender+ours": scheduler(
            random.Random(args.seed + 1),
            ours(epoch),
            (ScoreWeights(), weight, catalog, epoch),
            most_allocated=packs,
        ),
        "(c') same, spreading": scheduler(
            random.Random(args.seed + 1), ours(epoch), (ScoreWeights(), weight, catalog, epoch)
        ),
        "(d) oracle": oracle(workload),
    }
    results = {
        name: simulate(workload, args.nodes, args.slots, args.bandwidth_mb_s, place) for name, place in policies.items()
    }
    bound = cold_miss_bound(workload)
    oracle_rate = results["(d) oracle"].reconfigurations / args.pods

    print(
        f"{args.nodes} nodes x {args.slots} slots, {args.bitstreams} bitstreams (Zipf s={args.zipf}), "
        f"{args.pods} pods, load {args.load}, mean {args.mean_duration_s:.0f} s, "
        f"{args.two_slot_share:.0%} two-slot, {args.size_min_mb:.0f}-{args.size_max_mb:.0f} MB at "
        f"{args.bandwidth_mb_s:.0f} MB/s, seed {args.seed}"
    )
    header = (
        f"{'policy':22} {'reconf/pod':>10} {'reconf s':>10} {'delay p50 s':>11} {'delay p99 s':>11} "
        f"{'slot util':>9} {'x oracle':>8}"
    )
    print(header)
    for name, r in results.items():
        rate = r.reconfigurations / args.pods
        util = r.busy_slot_s / (args.nodes * args.slots * workload.pods[-1].arrival)
        print(
            f"{name:22} {rate:10.4f} {r.reconfiguration_s:10.0f} {percentile(r.delays, 0.5):11.3f} "
            f"{percentile(r.delays, 0.99):11.3f} {util:9.1%} {rate / oracle_rate:8.2f}"
        )
    print(
        f"{'cold-miss lower bound':22} {bound / args.pods:10.4f} {'':>10} {'':>11} {'':>11} {'':>9} "
        f"{bound / args.pods / oracle_rate:8.2f}"
    )
    a = results["(a) spread+first-fit"].reconfigurations
    c = results["(c) extender+ours"].reconfigurations
    print(
        f"(c) / (a) = {c / a:.3f} (target <= 0.25); (c) / oracle = {c / args.pods / oracle_rate:.3f} (target <= 1.15)"
    )
    print(
        f"simulated in {time.monotonic() - started:.1f} s; start delay median of all policies "
        f"{statistics.median([percentile(r.delays, 0.5) for r in results.values()]):.3f} s"
    )


if __name__ == "__main__":
    main()

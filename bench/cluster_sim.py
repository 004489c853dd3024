"""Cluster simulation: how many reconfigurations, and how much start delay, each placement policy costs.

Discrete-event and deterministic for a seed (``bench.sim``): N nodes with slots, pods
that each want one bitstream (Zipf popularity, optionally drifting) in 1 to 4 slots
of one node, arriving one by one or in bursts, for an exponentially distributed time.
Policies, side by side on the same pod sequence (``bench.sim.policies``): (a) spread
+ first-fit, (b) spread + the agent's slot choice, (c) the shipped fpga-scheduler
profile + the extender + the agent's slot choice, (c') the same with the other
NodeResourcesFit strategy; (e) DRA mode's placement (``bench.sim.dra``: the scheduler's
allocator with a cache-aware ``firstAvailable`` claim and the DRA profile, which also asks
the extender to score the slots the allocator takes, ``bench.sim.draextender``), and (e')
the same without the extender; (r) the online reference told the popularity law but not the arrivals
(``bench.sim.informed``); (d) the clairvoyant reference (``bench.sim.oracle``) and the
cold-miss lower bound. (b) and (c) run the project's real code.

Usage:
  python bench/cluster_sim.py [--nodes 100 --slots 4 --bitstreams 40 --zipf 1.1 --pods 20000 ...]
  python bench/cluster_sim.py --grid      # the fixed workload grid, one row per point, and the large clusters
  python bench/cluster_sim.py --grid --streams 3  # (c), (e) and (r) with 3 tie-break streams per point
  python bench/cluster_sim.py --scale     # only the large clusters (1000 to 5000 nodes, the scheduler's sample)
  python bench/cluster_sim.py --cache-gap # per grid point, what clairvoyance is worth in a single cache
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.extender.ranking import ANSWER_LIMIT  # noqa: E402
from agent.extender.scoring import parse_score_weights  # noqa: E402
from bench.sim.cachegap import cache_gap  # noqa: E402
from bench.sim.engine import percentile  # noqa: E402
from bench.sim.grid import GRID, INFORMED, ORACLE, A, C, grid_tables, run_point  # noqa: E402
from bench.sim.runs import run_all  # noqa: E402
from bench.sim.scale import scale_table  # noqa: E402
from bench.sim.streams import streams_table  # noqa: E402
from bench.sim.workload import Shape  # noqa: E402

#: Tie-break streams per point by default: enough to judge a 5 % target on the mean (one stream moves a per-point
#: ratio by about +-0.03), few enough that the whole grid runs in about half an hour on two cores.
STREAMS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="run the fixed workload grid instead of one point")
    parser.add_argument(
        "--cache-gap",
        action="store_true",
        help="per grid point: the best online cache rule (A0) against Belady's on its popularity law",
    )
    parser.add_argument(
        "--scale", action="store_true", help="only the large-cluster points (the scheduler's sample of the nodes)"
    )
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="grid points run in parallel")
    parser.add_argument(
        "--streams",
        type=int,
        default=STREAMS,
        help="with --grid or --scale: tie-break streams per point for the policies the targets compare",
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--slots", default="4", help="slots per node; several (2,4,8) are cycled over the nodes")
    parser.add_argument("--bitstreams", type=int, default=40)
    parser.add_argument("--zipf", type=float, default=1.1, help="popularity exponent s")
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--load", type=float, default=0.7, help="offered load: busy slots / all slots")
    parser.add_argument("--mean-duration-s", type=float, default=300.0)
    parser.add_argument("--multi-share", type=float, default=0.3, help="share of pods asking for 2..max slots")
    parser.add_argument("--max-slots", type=int, default=2)
    parser.add_argument("--burst", type=float, default=1.0, help="mean pods per arrival (1: Poisson)")
    parser.add_argument("--drift-s", type=float, default=0.0, help="popularity ranks dealt anew this often")
    parser.add_argument("--size-min-mb", type=float, default=20.0)
    parser.add_argument("--size-max-mb", type=float, default=80.0)
    parser.add_argument("--bandwidth-mb-s", type=float, default=100.0, help="configuration bandwidth")
    parser.add_argument(
        "--scheduler-config",
        type=Path,
        default=ROOT / "daemonset" / "scheduler-config.yaml",
        help="where (c) takes the extender weight and the slot scoring strategy from",
    )
    parser.add_argument(
        "--score-weights",
        type=parse_score_weights,
        default=None,
        help="the extender's slot values for (c) and (c'), as its --score-weights (default: as shipped)",
    )
    parser.add_argument(
        "--answer-limit",
        type=int,
        default=ANSWER_LIMIT,
        help="entries the extender's prioritize answer lists at most, as its --answer-limit (0: all)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    started = time.monotonic()
    if args.cache_gap:
        print(cache_gap_table(args.seed))
        return
    if args.streams < 1:
        parser.error(f"--streams must be 1 or more, not {args.streams}")
    if args.grid or args.scale:
        points, rows = run_all(
            args.seed,
            args.scheduler_config,
            args.processes,
            args.streams,
            args.score_weights,
            args.answer_limit,
            grid=args.grid,
        )
        if points:
            print(f"workload grid, seed {args.seed}, mean pod duration 300 s, 20-80 MB bitstreams at 100 MB/s")
            print(grid_tables(points))
            print()
            print(streams_table(points))
        print("\nLarge clusters: the scheduler's sample of the nodes (reconfigurations per pod)\n")
        print(scale_table(rows))
        took = time.monotonic() - started
        print(f"simulated in {took:.0f} s ({args.streams} tie-break streams, {args.processes} processes)")
        return

    shape = Shape(
        nodes=args.nodes,
        slots=tuple(int(s) for s in args.slots.split(",")),
        bitstreams=args.bitstreams,
        zipf=args.zipf,
        load=args.load,
        multi_share=args.multi_share,
        max_slots=args.max_slots,
        burst=args.burst,
        drift_s=args.drift_s,
        pods=args.pods,
        mean_duration_s=args.mean_duration_s,
        size_min_mb=args.size_min_mb,
        size_max_mb=args.size_max_mb,
        bandwidth_mb_s=args.bandwidth_mb_s,
    )
    point = run_point(shape, args.seed, args.scheduler_config, args.score_weights, args.answer_limit)
    oracle = point.rate(ORACLE)
    print(f"{shape.describe()}, {shape.pods} pods, seed {args.seed}")
    print(
        f"{'policy':44} {'reconf/pod':>10} {'reconf s':>10} {'delay p50 s':>11} {'delay p99 s':>11} "
        f"{'slot util':>9} {'x oracle':>8}"
    )
    for name, r in point.results.items():
        rate = point.rate(name)
        label = name
        if name == ORACLE:
            label = f"{name} ({point.oracle_variant})"
        elif name == INFORMED:
            label = f"{name} ({point.informed_variant})"
        util = r.busy_slot_s / (shape.total_slots * r.horizon) if r.horizon else 0.0
        print(
            f"{label:44} {rate:10.4f} {r.reconfiguration_s:10.0f} {percentile(r.delays, 0.5):11.3f} "
            f"{percentile(r.delays, 0.99):11.3f} {util:9.1%} {rate / oracle:8.2f}"
        )
    print(
        f"{'cold-miss lower bound':44} {point.bound_rate:10.4f} {'':>10} {'':>11} {'':>11} {'':>9} "
        f"{point.bound_rate / oracle:8.2f}"
    )
    print(
        f"(c) / (a) = {point.rate(C) / point.rate(A):.3f}; (c) / oracle = {point.rate(C) / oracle:.3f}; "
        f"(c) / (r) = {point.rate(C) / point.rate(INFORMED):.3f}"
    )
    print(
        f"simulated in {time.monotonic() - started:.1f} s; start delay median of all policies "
        f"{statistics.median([percentile(r.delays, 0.5) for r in point.results.values()]):.3f} s"
    )


def cache_gap_table(seed: int) -> str:
    lines = [
        "| # | workload | cache entries (free slots) | A0 misses | Belady misses | A0 / Belady |",
        "|---|---|---|---|---|---|",
    ]
    for index, shape in enumerate(GRID, 1):
        gap = cache_gap(shape, seed)
        lines.append(
            f"| {index} | {shape.describe()} | {gap.entries} | {gap.a0_misses:.3f} | {gap.belady_misses:.3f} | "
            f"{gap.ratio:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

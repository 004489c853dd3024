"""Large-cluster points of the grid: what the scheduler's sample of the nodes costs at 1000 to 5000 nodes.

At these sizes kube-scheduler filters and scores only a sample of the nodes
(``bench.sim.sampling``: about 42 % at 1000 nodes, 34 % at 2000, 10 % at 5000 with the
adaptive percentage), and the extender and DRA's allocator see only that sample. Each
point runs the scheduler-based policies twice: with the search of the shipped profiles
(their ``percentageOfNodesToScore``, adaptive when unset) and with every node scored
(``percentageOfNodesToScore: 100``, what the simulation assumed before). The references
are left out here: they look at every node for every pod, too slow at these sizes in
this simulation; the small points of the grid hold them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights
from bench.sim.engine import percentile, simulate
from bench.sim.grid import DRA, A, C, online_policies
from bench.sim.policies import PLATFORM, bitstream_name
from bench.sim.workload import Shape, make_workload

#: Catalogs grow with clusters. At 5000 nodes 10000 pods are about one turnover of the running ones (the
#: simulation is slow at that size): a warm-up more than a steady state there.
SCALE: list[Shape] = [
    Shape(nodes=1000, slots=(4,), bitstreams=200, zipf=1.0, pods=8000),
    Shape(nodes=2000, slots=(4,), bitstreams=300, zipf=1.0, pods=10000),
    Shape(nodes=5000, slots=(4,), bitstreams=500, zipf=1.0, pods=10000),
]
#: The policies run at scale: the plain scheduler, ours with the extender, DRA mode.
SCALE_POLICIES = (A, C, DRA)
SHIPPED, EVERY_NODE = "shipped search", "every node"


@dataclass(frozen=True, slots=True)
class ScaleRow:
    shape: Shape
    policy: str
    search: str
    rate: float
    delay_p50: float
    delay_p99: float


def run_scale_job(job: tuple[Shape, str, str, int, Path]) -> ScaleRow:
    shape, policy, search, seed, config = job
    workload = make_workload(shape, seed)
    catalog = {bitstream_name(b): PLATFORM for b in range(shape.bitstreams)}
    percentage = 100 if search == EVERY_NODE else None
    policies = online_policies(
        config, catalog, lambda: random.Random(seed + 1), ScoreWeights(), ANSWER_LIMIT, percentage=percentage
    )
    result = simulate(workload, policies[policy])
    return ScaleRow(
        shape,
        policy,
        search,
        result.per_pod(shape.pods),
        percentile(result.delays, 0.5),
        percentile(result.delays, 0.99),
    )


def scale_jobs(seed: int, config: Path) -> list[tuple[Shape, str, str, int, Path]]:
    """Every (point, policy, search), the slowest first (they run in parallel)."""
    jobs = [
        (shape, policy, search, seed, config)
        for shape in SCALE
        for policy in SCALE_POLICIES
        for search in (SHIPPED, EVERY_NODE)
        if not (policy == A and search == EVERY_NODE)
    ]
    return sorted(jobs, key=lambda job: -job[0].nodes)


def scale_table(rows: list[ScaleRow]) -> str:
    """Reconfigurations per pod and start delay per point and policy, sampled against every node."""
    lines = [
        "| nodes | workload | policy | reconf/pod, shipped search | reconf/pod, every node | sample / every node "
        "| delay p50 / p99 s, shipped search |",
        "|---|---|---|---|---|---|---|",
    ]
    found = {(row.shape, row.policy, row.search): row for row in rows}
    for shape in SCALE:
        for policy in SCALE_POLICIES:
            sampled = found.get((shape, policy, SHIPPED))
            every = found.get((shape, policy, EVERY_NODE))
            if sampled is None:
                continue
            versus = f"{sampled.rate / every.rate:.3f}" if every and every.rate else "-"
            every_rate = f"{every.rate:.3f}" if every else "-"
            lines.append(
                f"| {shape.nodes} | {shape.describe()} | {policy} | {sampled.rate:.3f} | {every_rate} | {versus} | "
                f"{sampled.delay_p50:.2f} / {sampled.delay_p99:.2f} |"
            )
    dra_vs_c = [
        found[(shape, DRA, SHIPPED)].rate / found[(shape, C, SHIPPED)].rate
        for shape in SCALE
        if (shape, DRA, SHIPPED) in found and (shape, C, SHIPPED) in found
    ]
    if dra_vs_c:
        lines += ["", "(e) DRA / (c) with the shipped search: " + ", ".join(f"{r:.3f}" for r in dra_vs_c)]
    return "\n".join(lines)


def run_scale(seed: int, config: Path, processes: int) -> list[ScaleRow]:
    jobs = scale_jobs(seed, config)
    if processes <= 1:
        return [run_scale_job(job) for job in jobs]
    import multiprocessing

    with multiprocessing.Pool(processes) as pool:
        return pool.map(run_scale_job, jobs, chunksize=1)

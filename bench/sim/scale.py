"""Large-cluster points of the grid: what the scheduler's sample of the nodes costs at 1000 to 5000 nodes.

At these sizes kube-scheduler filters and scores only a sample of the nodes
(``bench.sim.sampling``: about 42 % at 1000 nodes, 34 % at 2000, 10 % at 5000 with the
adaptive percentage), and the extender and DRA's allocator see only that sample. Each
point runs the scheduler-based policies (a), (c) and (e) with the search of the shipped
profiles (their ``percentageOfNodesToScore``, adaptive when unset), and (c) and (e) again
with every node scored (``percentageOfNodesToScore: 100``, what the simulation assumed
before). With ``--streams N``, (c) and (e) with the shipped search run with N tie-break
streams (``bench.sim.streams``); every node is scored with stream 0 only.

What a pod costs here is what the scheduler looks at: the nodes its search examines
(each a read of a count the engine keeps, ``SimNode.free_count``), the scores of those
found, and the extender's own answer (its one-slot index, per name for other pods). The
runs scoring every node at 5000 nodes are the costliest (about 6 ms of CPU a pod for (c),
9 ms for (e), on a core of the 2-core machine bench/RESULTS.md names; before the engine
kept its counts, (e) there took 53 s for its first 1000 pods, now 8 s, with the same
reconfigurations). Left out: the references (r) and the oracle, which look at every node's slots for
every pod (too slow at these sizes); the grid's small points hold them, so "(c) against
(r)" is judged there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights
from bench.sim.engine import percentile, simulate
from bench.sim.grid import DRA, A, C, online_policies, tie_seed
from bench.sim.policies import PLATFORM, bitstream_name
from bench.sim.streams import ratios, spread
from bench.sim.workload import Shape, make_workload

#: Catalogs grow with clusters, and so do the pods: each point runs about 3.7 turnovers of the pods running at
#: once (at load 0.7 about 2.15 per node), the first of them a warm-up from empty slots.
SCALE: list[Shape] = [
    Shape(nodes=1000, slots=(4,), bitstreams=200, zipf=1.0, pods=8000),
    Shape(nodes=2000, slots=(4,), bitstreams=300, zipf=1.0, pods=16000),
    Shape(nodes=5000, slots=(4,), bitstreams=500, zipf=1.0, pods=40000),
]
#: The policies run at scale: the plain scheduler, ours with the extender, DRA mode.
SCALE_POLICIES = (A, C, DRA)
SHIPPED, EVERY_NODE = "shipped search", "every node"


#: The policies run again with each further tie-break stream, with the shipped search.
SCALE_STREAMED = (C, DRA)

#: (point, policy, search, seed, scheduler configuration, tie-break stream)
ScaleJob = tuple[Shape, str, str, int, Path, int]


@dataclass(frozen=True, slots=True)
class ScaleRow:
    shape: Shape
    policy: str
    search: str
    rate: float
    delay_p50: float
    delay_p99: float
    stream: int = 0


def run_scale_job(job: ScaleJob) -> ScaleRow:
    shape, policy, search, seed, config, stream = job
    workload = make_workload(shape, seed)
    catalog = {bitstream_name(b): PLATFORM for b in range(shape.bitstreams)}
    percentage = 100 if search == EVERY_NODE else None
    policies = online_policies(
        config,
        catalog,
        lambda: random.Random(tie_seed(seed, stream)),
        ScoreWeights(),
        ANSWER_LIMIT,
        percentage=percentage,
    )
    result = simulate(workload, policies[policy])
    return ScaleRow(
        shape,
        policy,
        search,
        result.per_pod(shape.pods),
        percentile(result.delays, 0.5),
        percentile(result.delays, 0.99),
        stream,
    )


def scale_jobs(seed: int, config: Path, streams: int = 1) -> list[ScaleJob]:
    """Every (point, policy, search) with tie-break stream 0, and (c) and (e) with the shipped search with each
    further stream; every node is scored with stream 0 only (the comparison of searches is one run each)."""
    jobs = [
        (shape, policy, search, seed, config, 0)
        for shape in SCALE
        for policy in SCALE_POLICIES
        for search in (SHIPPED, EVERY_NODE)
        if not (policy == A and search == EVERY_NODE)
    ]
    jobs += [
        (shape, policy, SHIPPED, seed, config, stream)
        for stream in range(1, streams)
        for shape in SCALE
        for policy in SCALE_STREAMED
    ]
    return jobs


def scale_table(rows: list[ScaleRow]) -> str:
    """Reconfigurations per pod and start delay per point and policy (tie-break stream 0), sampled against every
    node; then (e) / (c) per point over the streams run (``bench.sim.streams``)."""
    lines = [
        "| nodes | workload | policy | reconf/pod, shipped search | reconf/pod, every node | sample / every node "
        "| delay p50 / p99 s, shipped search | delay p50 / p99 s, every node |",
        "|---|---|---|---|---|---|---|---|",
    ]
    found = {(row.shape, row.policy, row.search): row for row in rows if row.stream == 0}
    for shape in SCALE:
        for policy in SCALE_POLICIES:
            sampled = found.get((shape, policy, SHIPPED))
            every = found.get((shape, policy, EVERY_NODE))
            if sampled is None:
                continue
            versus = f"{sampled.rate / every.rate:.3f}" if every and every.rate else "-"
            every_rate = f"{every.rate:.3f}" if every else "-"
            every_delay = f"{every.delay_p50:.2f} / {every.delay_p99:.2f}" if every else "-"
            lines.append(
                f"| {shape.nodes} | {shape.describe()}, {shape.pods} pods | {policy} | {sampled.rate:.3f} | "
                f"{every_rate} | {versus} | {sampled.delay_p50:.2f} / {sampled.delay_p99:.2f} | {every_delay} |"
            )
    return "\n".join([*lines, "", scale_streams_table(rows)])


def scale_streams_table(rows: list[ScaleRow]) -> str:
    """(e) / (c) with the shipped search per point over the tie-break streams run (paired by stream)."""
    lines = [
        "(e) DRA / (c) with the shipped search, over the tie-break streams (mean, lowest..highest, sd):",
        "",
        "| nodes | streams | (c) mean | (e) DRA mean | (e)/(c) |",
        "|---|---|---|---|---|",
    ]
    for shape in SCALE:
        rates = {
            policy: {
                row.stream: row.rate for row in rows if (row.shape, row.policy, row.search) == (shape, policy, SHIPPED)
            }
            for policy in SCALE_STREAMED
        }
        streams = sorted(set(rates[C]) & set(rates[DRA]))
        if not streams:
            continue
        c, e = [rates[C][k] for k in streams], [rates[DRA][k] for k in streams]
        lines.append(
            f"| {shape.nodes} | {len(streams)} | {sum(c) / len(c):.4f} | {sum(e) / len(e):.4f} | "
            f"{spread(ratios(e, c)).cell()} |"
        )
    return "\n".join(lines)


def run_scale(seed: int, config: Path, processes: int, streams: int = 1) -> list[ScaleRow]:
    jobs = scale_jobs(seed, config, streams)
    if processes <= 1:
        return [run_scale_job(job) for job in jobs]
    import multiprocessing

    with multiprocessing.Pool(processes) as pool:
        return pool.map(run_scale_job, jobs, chunksize=1)

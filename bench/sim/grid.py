"""Run every policy on a workload point, and the fixed grid of points (``bench/cluster_sim.py --grid``)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from agent.extender.ranking import ANSWER_LIMIT
from agent.extender.scoring import ScoreWeights
from bench.sim.dra import dra
from bench.sim.draextender import DraExtender
from bench.sim.engine import Placement, Result, best_of, percentile, simulate
from bench.sim.informed import EXACT, TOLD, WINDOWS, ToldFacts, exact
from bench.sim.oracle import VARIANTS, clairvoyant, clairvoyant_slots, never_again_first
from bench.sim.policies import PLATFORM, WithExtender, bitstream_name, first_fit, ours, plain
from bench.sim.sampling import Sampler
from bench.sim.workload import Shape, Workload, cold_miss_bound, make_workload

#: The clairvoyant variants that keep (c)'s placement: slots chosen knowing the future, or (c)'s own slot
#: order with the content nobody asks for again overwritten first.
ONLINE_PLACEMENT = "(c)'s placement, clairvoyant slots"
ONLINE_SLOTS = "(c), content never asked again first"
#: The online reference's exact rule (bench.sim.informed) with the content nobody asks for again overwritten first.
EXACT_NEVER_AGAIN = "(r) exact, content never asked again first"
#: The online reference's other rule ((c) told the popularity law), with its slots chosen as in ONLINE_SLOTS.
TOLD_NEVER_AGAIN = "(r) (c) told, content never asked again first"
A, B, C, C2, ORACLE = "(a) spread+first-fit", "(b) spread+ours", "(c) extender+ours", "(c') other packing", "(d) oracle"
#: DRA mode's placement (bench.sim.dra): the scheduler's allocator with the shipped DRA profile, which also
#: calls the extender (bench.sim.draextender: it scores the slots the allocator's first fit takes).
DRA = "(e) DRA"
#: The same without the extender (the DRA profile before it called the extender), for comparison.
DRA_ALONE = "(e') DRA, no extender"
#: The online reference (bench.sim.informed): the best placement told the popularity law, not the arrivals.
INFORMED = "(r) online, told the popularity"
#: Policies that know nothing of the future (the oracle must beat each of them on every point).
ONLINE = (A, B, C, C2, DRA, DRA_ALONE)
#: The policies run again with each further tie-break stream (``--streams``): those the targets compare.
STREAMED = (C, DRA, INFORMED)
#: Tie-break streams' seeds lie this far apart (``tie_seed``).
STREAM_STRIDE = 1000

_BASE = Shape(pods=5000)
#: The grid: shapes a real cluster has, each differing from the default in one to four ways.
GRID: list[Shape] = [
    _BASE,
    replace(_BASE, load=0.5),
    replace(_BASE, load=0.9),
    replace(_BASE, load=0.95),
    replace(_BASE, zipf=0.6),
    replace(_BASE, zipf=1.4),
    replace(_BASE, bitstreams=10),
    replace(_BASE, bitstreams=300, zipf=0.8),
    replace(_BASE, multi_share=0.0),
    replace(_BASE, multi_share=0.5, max_slots=4),
    replace(_BASE, burst=4.0),
    replace(_BASE, drift_s=1800.0),
    replace(_BASE, burst=4.0, drift_s=1800.0),
    Shape(nodes=32, slots=(8,), bitstreams=120, zipf=0.8, multi_share=0.4, max_slots=4, pods=4000),
    Shape(nodes=32, slots=(8,), bitstreams=120, zipf=0.8, multi_share=0.4, max_slots=4, load=0.9, pods=4000),
    Shape(nodes=32, slots=(8,), bitstreams=120, zipf=0.8, multi_share=0.4, max_slots=4, burst=8.0, pods=4000),
    Shape(nodes=32, slots=(2,), bitstreams=10, zipf=1.0, multi_share=0.2, pods=3000),
    Shape(nodes=200, slots=(2,), bitstreams=40, zipf=1.1, multi_share=0.0, pods=6000),
    Shape(nodes=200, slots=(2,), bitstreams=300, zipf=0.6, multi_share=0.1, pods=6000),
    Shape(nodes=64, slots=(2, 4, 8), bitstreams=60, zipf=1.0, multi_share=0.3, max_slots=4, pods=5000),
    Shape(nodes=120, slots=(2, 8), bitstreams=100, zipf=0.8, multi_share=0.5, max_slots=4, load=0.8, pods=6000),
    Shape(nodes=200, slots=(8,), bitstreams=300, zipf=1.1, multi_share=0.2, pods=10000),
    Shape(nodes=200, slots=(4,), bitstreams=200, zipf=1.0, load=0.95, pods=8000),
    Shape(nodes=48, slots=(4,), bitstreams=20, zipf=1.4, load=0.5, pods=3000),
    Shape(nodes=64, slots=(4,), bitstreams=100, zipf=1.2, drift_s=900.0, pods=5000),
    Shape(
        nodes=64,
        slots=(2, 4, 8),
        bitstreams=80,
        zipf=0.8,
        load=0.9,
        multi_share=0.3,
        max_slots=4,
        burst=4.0,
        drift_s=1800.0,
        pods=5000,
    ),
]


@dataclass(frozen=True, slots=True)
class PointResult:
    shape: Shape
    results: dict[str, Result]
    #: Which clairvoyant variant gave the reference.
    oracle_variant: str
    bound: int
    #: Which told-the-popularity rule gave the online reference.
    informed_variant: str = ""
    #: Reconfigurations per pod of the ``STREAMED`` policies with each further tie-break stream (``run_stream``).
    more_streams: tuple[dict[str, float], ...] = ()

    def rate(self, policy: str) -> float:
        return self.results[policy].per_pod(self.shape.pods)

    def stream_rates(self, policy: str) -> list[float]:
        """The policy's reconfigurations per pod with each tie-break stream run, the grid's own (stream 0) first."""
        return [self.rate(policy), *(rates[policy] for rates in self.more_streams)]

    @property
    def bound_rate(self) -> float:
        return self.bound / self.shape.pods


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


def percentage_to_score(path: Path) -> int | None:
    """The configuration's percentageOfNodesToScore for its one profile: the profile's, else the top level's
    (None: adaptive)."""
    config = yaml.safe_load(path.read_text())
    (profile,) = config["profiles"]
    value = profile.get("percentageOfNodesToScore", config.get("percentageOfNodesToScore"))
    return None if value is None else int(value)


def dra_config(scheduler_config: Path) -> Path:
    """The DRA profile shipped beside the extender one (daemonset/dra-mode/scheduler-config.yaml)."""
    return scheduler_config.parent / "dra-mode" / "scheduler-config.yaml"


def dra_percentage(scheduler_config: Path) -> int | None:
    path = dra_config(scheduler_config)
    return percentage_to_score(path) if path.exists() else None


def dra_extender_weight(scheduler_config: Path) -> int:
    """The extender's weight in the DRA profile: its own ``extenders`` entry when it lists one, else the
    extender profile's (the same extender, called by both)."""
    path = dra_config(scheduler_config)
    extenders = yaml.safe_load(path.read_text()).get("extenders") if path.exists() else None
    return int(extenders[0]["weight"]) if extenders else profile_settings(scheduler_config)[0]


def run_point(
    shape: Shape,
    seed: int,
    scheduler_config: Path,
    weights: ScoreWeights | None = None,
    answer_limit: int = ANSWER_LIMIT,
) -> PointResult:
    weight, packs = profile_settings(scheduler_config)
    workload = make_workload(shape, seed)
    catalog = {bitstream_name(b): PLATFORM for b in range(shape.bitstreams)}
    weights = weights if weights is not None else ScoreWeights()

    def rng() -> random.Random:
        return random.Random(tie_seed(seed, 0))

    results = {
        name: simulate(workload, place)
        for name, place in online_policies(scheduler_config, catalog, rng, weights, answer_limit).items()
    }
    online_placement = WithExtender(
        rng(), clairvoyant_slots(workload), weights, weight, catalog, answer_limit=answer_limit, most_allocated=packs
    )
    online_slots = WithExtender(
        rng(), never_again_first(workload), weights, weight, catalog, answer_limit=answer_limit, most_allocated=packs
    )
    told_runs = informed_runs(workload, rng, weights, weight, catalog, packs, answer_limit)
    informed_variant, results[INFORMED] = best_of(told_runs)
    told_exact = exact(workload, rng(), clairvoyant=True)
    told_slots = WithExtender(
        rng(), never_again_first(workload), weights, weight, catalog, packs, ToldFacts(workload), answer_limit
    )
    # What knows the arrivals knows their law too: the online reference's placements are among its options.
    variant, results[ORACLE] = best_oracle(
        workload,
        {
            ONLINE_PLACEMENT: online_placement,
            ONLINE_SLOTS: online_slots,
            EXACT_NEVER_AGAIN: told_exact,
            TOLD_NEVER_AGAIN: told_slots,
        },
        {f"(r), {name}": run for name, run in told_runs.items()},
    )
    return PointResult(shape, results, variant, cold_miss_bound(workload), informed_variant)


def informed_runs(
    workload: Workload,
    rng: Callable[[], random.Random],
    weights: ScoreWeights,
    weight: int,
    catalog: dict[str, str],
    packs: bool,
    answer_limit: int,
) -> dict[str, Result]:
    """The online reference's rules (``bench.sim.informed``), each run: (r) is the best of them."""
    told = WithExtender(
        rng(), ours, weights, weight, catalog, packs, facts=ToldFacts(workload), answer_limit=answer_limit
    )
    runs = {f"{EXACT}, window {w:g}": simulate(workload, exact(workload, rng(), window=w)) for w in WINDOWS}
    runs[TOLD] = simulate(workload, told)
    return runs


def tie_seed(seed: int, stream: int) -> int:
    """The seed of the scheduler's random tie-breaks (and the references' own) for a workload seed and a stream;
    stream 0 is the one the grid has always used."""
    return seed + 1 + STREAM_STRIDE * stream


def run_stream(
    shape: Shape,
    seed: int,
    scheduler_config: Path,
    stream: int,
    weights: ScoreWeights | None = None,
    answer_limit: int = ANSWER_LIMIT,
) -> dict[str, float]:
    """The ``STREAMED`` policies' reconfigurations per pod on the point's workload, with tie-break stream
    ``stream``: what the scheduler's random picks alone move."""
    weight, packs = profile_settings(scheduler_config)
    workload = make_workload(shape, seed)
    catalog = {bitstream_name(b): PLATFORM for b in range(shape.bitstreams)}
    weights = weights if weights is not None else ScoreWeights()

    def rng() -> random.Random:
        return random.Random(tie_seed(seed, stream))

    policies = online_policies(scheduler_config, catalog, rng, weights, answer_limit)
    rates = {name: simulate(workload, policies[name]).per_pod(shape.pods) for name in (C, DRA)}
    _, informed = best_of(informed_runs(workload, rng, weights, weight, catalog, packs, answer_limit))
    rates[INFORMED] = informed.per_pod(shape.pods)
    return rates


def online_policies(
    scheduler_config: Path,
    catalog: dict[str, str],
    rng: Callable[[], random.Random],
    weights: ScoreWeights,
    answer_limit: int = ANSWER_LIMIT,
    percentage: int | None = None,
) -> dict[str, Placement]:
    """(a), (b), (c), (c'), (e) and (e'), each with its own scheduler's search of the nodes: the shipped profile's
    percentageOfNodesToScore (DRA's from its own profile), or ``percentage`` for all of them."""
    weight, packs = profile_settings(scheduler_config)
    extender = percentage if percentage is not None else percentage_to_score(scheduler_config)
    in_dra = percentage if percentage is not None else dra_percentage(scheduler_config)

    def search() -> Sampler:
        return Sampler(extender)

    return {
        A: plain(rng(), first_fit, sampler=search()),
        B: plain(rng(), ours, sampler=search()),
        C: WithExtender(
            rng(), ours, weights, weight, catalog, answer_limit=answer_limit, most_allocated=packs, sampler=search()
        ),
        C2: WithExtender(
            rng(), ours, weights, weight, catalog, answer_limit=answer_limit, most_allocated=not packs, sampler=search()
        ),
        DRA: dra(
            rng(),
            lru=True,
            sampler=Sampler(in_dra),
            extender=DraExtender(weights, catalog),
            extender_weight=dra_extender_weight(scheduler_config),
        ),
        DRA_ALONE: dra(rng(), lru=True, sampler=Sampler(in_dra)),
    }


def best_oracle(
    workload: Workload, more: dict[str, Placement] | None = None, done: dict[str, Result] | None = None
) -> tuple[str, Result]:
    """The best of the clairvoyant rules (``bench.sim.oracle``), of ``more`` clairvoyant placements, and of
    the runs ``done`` already (placements a clairvoyant policy could also take)."""
    runs = {
        name: simulate(workload, clairvoyant(workload, make(workload), pack_first))
        for name, (make, pack_first) in VARIANTS.items()
    }
    runs.update({name: simulate(workload, place) for name, place in (more or {}).items()})
    runs.update(done or {})
    return best_of(runs)


def grid_tables(points: list[PointResult]) -> str:
    """The reconfigurations table (one row per point) and the start-delay table, with the verdicts."""
    lines = [
        "| # | workload | (a) | (b) | (c) | (c') | (e) DRA | (e') DRA, no extender | (r) online, told | oracle "
        "| bound | (c)/oracle | (r)/oracle | (c)/(r) | (c)/min(a,b) | (e)/oracle | (e)/(c) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios, told_ratios, versus_told, worst_ab, oracle_lost, dra_ratios = [], [], [], 0.0, [], []
    dra_versus_c: list[float] = []
    for index, point in enumerate(points, 1):
        oracle = point.rate(ORACLE)
        ratio = point.rate(C) / oracle
        ratios.append(ratio)
        told_ratios.append(point.rate(INFORMED) / oracle)
        versus_told.append(point.rate(C) / point.rate(INFORMED))
        versus = point.rate(C) / min(point.rate(A), point.rate(B))
        worst_ab = max(worst_ab, versus)
        dra_ratios.append(point.rate(DRA) / oracle)
        dra_versus_c.append(point.rate(DRA) / point.rate(C))
        if min(point.rate(p) for p in ONLINE) < oracle:
            oracle_lost.append(index)
        lines.append(
            f"| {index} | {point.shape.describe()} | {point.rate(A):.3f} | {point.rate(B):.3f} | "
            f"**{point.rate(C):.3f}** | {point.rate(C2):.3f} | {point.rate(DRA):.3f} | {point.rate(DRA_ALONE):.3f} | "
            f"{point.rate(INFORMED):.3f} | {oracle:.3f} | {point.bound_rate:.3f} | {ratio:.2f} | "
            f"{told_ratios[-1]:.2f} | {versus_told[-1]:.2f} | {versus:.2f} | {dra_ratios[-1]:.2f} | "
            f"{dra_versus_c[-1]:.3f} |"
        )
    lines += [
        "",
        "Start delay (queueing + programming), seconds, p50 / p99:",
        "",
        "| # | (a) | (b) | (c) | (c') | (e) DRA | (e') DRA, no extender | (r) online, told | oracle |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for index, point in enumerate(points, 1):
        cells = " | ".join(
            f"{percentile(point.results[p].delays, 0.5):.2f} / {percentile(point.results[p].delays, 0.99):.2f}"
            for p in (A, B, C, C2, DRA, DRA_ALONE, INFORMED, ORACLE)
        )
        lines.append(f"| {index} | {cells} |")
    beyond = [str(i) for i, r in enumerate(told_ratios, 1) if r > 1.10]
    lines += [
        "",
        f"(c) / oracle: median {statistics.median(ratios):.3f}, worst {max(ratios):.3f} "
        f"at point {ratios.index(max(ratios)) + 1} (targets: median <= 1.05, every point <= 1.10)",
        f"(r) / oracle, what knowing the next arrivals is worth: median {statistics.median(told_ratios):.3f}, "
        f"worst {max(told_ratios):.3f}; above 1.10 at: {', '.join(beyond) if beyond else 'no point'}",
        f"(c) / (r), what our estimate and scoring leave: median {statistics.median(versus_told):.3f}, "
        f"worst {max(versus_told):.3f} at point {versus_told.index(max(versus_told)) + 1}",
        f"(c) / min((a), (b)): worst {worst_ab:.3f} (target <= 1)",
        f"(e) DRA / oracle: median {statistics.median(dra_ratios):.3f}, worst {max(dra_ratios):.3f}",
        f"(e) DRA / (c): median {statistics.median(dra_versus_c):.3f}, worst {max(dra_versus_c):.3f} "
        f"at point {dra_versus_c.index(max(dra_versus_c)) + 1} (target: every point <= 1.05)",
        "oracle beaten by an online policy at: " + (", ".join(map(str, oracle_lost)) if oracle_lost else "no point"),
    ]
    return "\n".join(lines)

"""Filter and prioritize: pure functions of a pod's demand and the nodes' published state.

**Filter** answers only hard facts that the scheduler cannot see itself: a node fails
when its catalog cannot program a bitstream the pod asks for, or when it has fewer
healthy slots of that bitstream's platform (per the node's own catalog) than the pod
needs at once. Free or held does not matter here: the scheduler counts free slots
(the extended resource) and preemption can free held ones, but no eviction adds a
slot of the right platform, so every failure is "unresolvable". A node that has
published no state passes: no data is no fact.

**Prioritize** scores 0..10 by what placing the pod there costs in reconfiguration,
now and later. Each slot the pod asks a bitstream for is worth ``loaded`` when a free
slot already holds that bitstream (nothing to program), ``empty`` when a free slot of
the right platform holds nothing, and when a loaded free slot must be overwritten,
``empty - (empty - evict) * value``, the cheapest such slot first. A slot's ``value``
is the mean of two estimates of how likely its content is wanted again soon: the
cluster's (``keep``, from ``agent.extender.facts``: how many pods ask for that bitstream
lately, against how many free copies of it exist) and the slot's own recency (1 when a
pod used it just now, down to 0 at ``LRU_HORIZON_S`` or never). The node's score is the
mean over those slots, rounded; 0 when the pod does not fit in the node's free healthy
slots. A pod that names no bitstream, and a node without published state, get
``neutral`` on every node, which changes no ranking.

What a pod asks for is its :class:`~agent.extender.demand.PodDemand`.

Cost: a call names hundreds or thousands of nodes, and pods come in crowds of the
same kind (the replicas of one Deployment). A pod that names one bitstream (nearly
all) is scored on a short path, and each node state remembers its answers for such
pods (``NodeSlots.memo``: an unchanged node is worked out once per kind of pod, and
the state is replaced, memo and all, when the node changes). So that a remembered
score stays right, prioritize reads the clock in steps of ``CLOCK_STEP_S`` and keys the
memo with the version of the cluster's values.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.extender.demand import PodDemand
from agent.extender.nodestate import LoadedSlot, NodeSlots

MAX_SCORE = 10
#: Taken off a node's score when a bitstream the pod names is declared in the cluster (FpgaBitstream) but
#: not in the node's catalog: the agent can pull it, which costs a download, so a node that has the file
#: wins over one that must fetch it, and a free slot that holds the bitstream still wins over both.
DOWNLOAD_PENALTY = 1
#: A loaded slot whose bitstream has not been used for this long is worth the full ``evict`` weight.
LRU_HORIZON_S = 3600.0
#: How much of a loaded slot's value is its own recency; the rest is the cluster's value of its content.
#: Chosen on the workload grid of bench/cluster_sim.py ((c) / clairvoyant reference, median and worst of
#: 26 points, with the cluster values of agent.extender.facts): 0.25 gives 1.136 / 1.57, 0.5 gives
#: 1.102 / 1.32, 0.75 gives 1.105 / 1.35; 0 (the cluster values alone) 1.18 / 2.10. Recency matters
#: most among slots whose content the cluster values alike (nobody asks for it): without it the packing
#: picks the fullest node, whose free slot is often the one freed last, and overwrites the newest content.
RECENCY_SHARE = 0.5
#: Scoring reads the clock in steps of this size, so that a node's score can be reused within a step.
CLOCK_STEP_S = 60
#: Answers remembered per node state (cleared when full).
MEMO_LIMIT = 64

NodeLookup = Callable[[str], NodeSlots | None]


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Slot values for prioritize (each 0..10), and the score of a pod or node with nothing to go by."""

    loaded: int = 10
    empty: int = 7
    evict: int = 1
    neutral: int = 5

    def __post_init__(self) -> None:
        for name in ("loaded", "empty", "evict", "neutral"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SCORE:
                raise ValueError(f"{name} must be an integer from 0 to {MAX_SCORE}, got {value!r}")

    def __str__(self) -> str:
        return f"loaded={self.loaded},empty={self.empty},evict={self.evict},neutral={self.neutral}"


def parse_score_weights(text: str) -> ScoreWeights:
    """``"loaded=10,empty=7,evict=1,neutral=5"``; keys left out keep their defaults. ValueError if bad."""
    values: dict[str, int] = {}
    known = ("loaded", "empty", "evict", "neutral")
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise ValueError(f"expects key=value pairs with keys {', '.join(known)}, got {part!r}")
        if key in values:
            raise ValueError(f"{key} is given twice")
        try:
            values[key] = int(raw.strip())
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw.strip()!r}") from None
    return ScoreWeights(**values)


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """Names that pass (in the order asked) and the failed ones with the reason."""

    passed: list[str]
    failed: dict[str, str]


def check_node(demand: PodDemand, node: NodeSlots | None) -> str | None:
    """Why the pod cannot run on this node at all (hard facts only); None when it can, or nothing is known."""
    if node is None or not demand.by_bitstream:
        return None
    if demand.single is not None:  # one bitstream: its peak is also its platform's peak
        name, count = demand.single
        platform = node.bitstreams.get(name)
        if platform is not None and node.healthy.get(platform, 0) >= count:
            return None
    missing = sorted(name for name in demand.by_bitstream if name not in node.bitstreams)
    if missing:
        names = ", ".join(f'"{name}"' for name in missing)
        noun = "bitstream" if len(missing) == 1 else "bitstreams"
        return f"the node's catalog has no {noun} {names}"
    for platform, (count, wanted) in _platform_needs(demand, node).items():
        have = node.healthy.get(platform, 0)
        if have < count:
            listed = ", ".join(f'"{name}"' for name in wanted)
            noun, verb = ("bitstream", "needs") if len(wanted) == 1 else ("bitstreams", "need")
            return (
                f"{noun} {listed} (platform {platform}) {verb} {count} healthy "
                f"slot{'s' if count != 1 else ''} of that platform, the node has {have}"
            )
    return None


def _platform_needs(demand: PodDemand, node: NodeSlots) -> dict[str, tuple[int, list[str]]]:
    """Platform -> (slots of it used at once, the bitstreams that need it): app containers summed, init one by one."""
    app: dict[str, int] = {}
    peak: dict[str, int] = {}
    names: dict[str, list[str]] = {}
    for container in demand.containers:
        if container.bitstream is None:
            continue
        platform = node.bitstreams[container.bitstream]
        if container.bitstream not in names.setdefault(platform, []):
            names[platform].append(container.bitstream)
        if container.init:
            peak[platform] = max(peak.get(platform, 0), container.slots)
        else:
            app[platform] = app.get(platform, 0) + container.slots
    return {p: (max(app.get(p, 0), peak.get(p, 0)), sorted(names[p])) for p in names}


def filter_nodes(demand: PodDemand, names: Iterable[str], lookup: NodeLookup) -> FilterOutcome:
    passed: list[str] = []
    failed: dict[str, str] = {}
    if not demand.by_bitstream:
        return FilterOutcome(list(names), failed)
    # A pod naming one bitstream (most pods; all replicas of a Deployment alike) gets the answer
    # each node state gave before, if any: an unchanged node is checked once, not once per pod.
    key = f"filter|{demand.single[0]}|{demand.single[1]}" if demand.single is not None else None
    for name in names:
        node = lookup(name)
        if node is None:
            passed.append(name)
            continue
        if key is None:
            reason = check_node(demand, node)
        else:
            memo = node.memo
            known = memo.get(key, _UNKNOWN)
            if known is _UNKNOWN:
                reason = check_node(demand, node)
                remember(memo, key, reason)
            else:
                reason = known  # type: ignore[assignment]
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return FilterOutcome(passed, failed)


_UNKNOWN = object()


def remember(memo: dict[str, object], key: str, value: object) -> None:
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value


#: No cluster-wide values (an extender that has scored no pod yet).
NO_VALUES: Mapping[str, float] = types.MappingProxyType({})


def score_node(
    demand: PodDemand, node: NodeSlots | None, weights: ScoreWeights, now: float, keep: Mapping[str, float] = NO_VALUES
) -> int:
    """0..10 for placing the pod on this node (see the module docstring)."""
    if node is None or not demand.by_bitstream:
        return weights.neutral
    if demand.single is not None:
        return score_single(demand, node, weights, now, keep)
    return _score_general(demand, node, weights, now, keep)


def _score_general(
    demand: PodDemand, node: NodeSlots, weights: ScoreWeights, now: float, keep: Mapping[str, float] = NO_VALUES
) -> int:
    total = 0.0
    hits_taken: dict[str, int] = {}
    missing: dict[str, int] = {}
    for name, count in demand.by_bitstream.items():
        platform = node.bitstreams.get(name)
        if platform is None:
            return 0
        hits = min(count, node.free_loaded.get((name, platform), 0))
        hits_taken[name] = hits
        total += hits * weights.loaded
        if count > hits:
            missing[platform] = missing.get(platform, 0) + count - hits
    taken = sum(hits_taken.values())
    for platform, count in missing.items():
        empty = min(count, node.free_empty.get(platform, 0))
        total += empty * weights.empty
        count -= empty
        taken += empty
        if count:
            # The slots already counted as hits are not up for eviction.
            skip = {name: hits for name, hits in hits_taken.items() if node.bitstreams[name] == platform}
            costs: list[float] = []
            for slot in node.reusable.get(platform, ()):
                if slot.bitstream is not None and skip.get(slot.bitstream, 0) > 0:
                    skip[slot.bitstream] -= 1
                    continue
                costs.append(overwrite_score(slot, weights, now, keep))
            if len(costs) < count:
                return 0
            costs.sort(reverse=True)
            total += sum(costs[:count])
            taken += count
    if node.free - taken < demand.unnamed:
        return 0
    mean = total / sum(demand.by_bitstream.values())
    score = max(0, min(MAX_SCORE, math.floor(mean + 0.5)))
    if node.downloads and not node.downloads.isdisjoint(demand.by_bitstream):
        return max(0, score - DOWNLOAD_PENALTY)
    return score


def score_single(
    demand: PodDemand, node: NodeSlots, weights: ScoreWeights, now: float, keep: Mapping[str, float] = NO_VALUES
) -> int:
    """:func:`score_node` for a pod that names one bitstream (the same rules, fewer steps)."""
    assert demand.single is not None
    name, count = demand.single
    platform = node.bitstreams.get(name)
    if platform is None:
        return 0
    hits = node.free_loaded.get((name, platform), 0)
    if hits >= count:
        total = float(count * weights.loaded)
    else:
        total = float(hits * weights.loaded)
        need = count - hits
        empty = node.free_empty.get(platform, 0)
        if empty >= need:
            total += need * weights.empty
        else:
            total += empty * weights.empty
            need -= empty
            # The loaded slots counted as hits (all that hold the bitstream) are not up for eviction.
            costs = [
                overwrite_score(slot, weights, now, keep)
                for slot in node.reusable.get(platform, ())
                if slot.bitstream != name
            ]
            if len(costs) < need:
                return 0
            costs.sort(reverse=True)
            total += sum(costs[:need])
    if node.free - count < demand.unnamed:
        return 0
    score = max(0, min(MAX_SCORE, math.floor(total / count + 0.5)))
    return max(0, score - DOWNLOAD_PENALTY) if name in node.downloads else score


def score_one_slot(
    bitstream: str, node: NodeSlots, weights: ScoreWeights, now: float, keep: Mapping[str, float], version: str
) -> int:
    """:func:`score_single` for a pod that asks one slot of ``bitstream`` and nothing else (the same result).

    Nearly every pod is one, and for it a node scores ``loaded`` when a free slot holds
    the bitstream, 0 when its catalog lacks it, and otherwise what its best other free
    slot is worth, which does not depend on the bitstream: that part is worked out
    once per node state and platform, for the clock step and cluster values that
    ``version`` names, and shared by every bitstream.
    """
    platform = node.bitstreams.get(bitstream)
    if platform is None:
        return 0
    penalty = DOWNLOAD_PENALTY if bitstream in node.downloads else 0
    if node.free_loaded.get((bitstream, platform)):
        return max(0, weights.loaded - penalty)
    key = f"base|{platform}|{version}"
    memo = node.memo
    base = memo.get(key)
    if base is None:
        base = base_score(node, platform, weights, now, keep)
        remember(memo, key, base)
    return max(0, base - penalty)  # type: ignore[operator]


def base_score(node: NodeSlots, platform: str, weights: ScoreWeights, now: float, keep: Mapping[str, float]) -> int:
    """One slot of ``platform`` that holds no wanted bitstream: ``empty``, else the best overwrite, else 0 (no room)."""
    if node.free_empty.get(platform, 0) > 0:
        return weights.empty
    reusable = node.reusable.get(platform, ())
    if not reusable:
        return 0
    best = max(overwrite_score(slot, weights, now, keep) for slot in reusable)
    return max(0, min(MAX_SCORE, math.floor(best + 0.5)))


def overwrite_score(slot: LoadedSlot, weights: ScoreWeights, now: float, keep: Mapping[str, float]) -> float:
    """``empty`` for a slot whose content nobody is likely to want soon, down to ``evict`` (module docstring)."""
    recency = 0.0 if slot.last_used <= 0 else 1.0 - min(1.0, max(0.0, now - slot.last_used) / LRU_HORIZON_S)
    cluster = keep.get(slot.bitstream, 0.0) if slot.bitstream is not None else 0.0
    return weights.empty - (weights.empty - weights.evict) * (RECENCY_SHARE * recency + (1.0 - RECENCY_SHARE) * cluster)


def prioritize_nodes(
    demand: PodDemand,
    names: Sequence[str],
    lookup: NodeLookup,
    weights: ScoreWeights,
    now: float,
    keep: Mapping[str, float] = NO_VALUES,
    keep_version: int = 0,
) -> list[tuple[str, int]]:
    """(name, score) for every name asked, in order. The clock is read in steps of CLOCK_STEP_S.

    ``keep_version`` must change whenever ``keep`` does (answers are remembered under it).
    """
    neutral = weights.neutral
    if not demand.by_bitstream:
        return [(name, neutral) for name in names]
    step = int(now // CLOCK_STEP_S)
    now = float(step * CLOCK_STEP_S)
    if demand.single is None:
        return [(name, score_node(demand, lookup(name), weights, now, keep)) for name in names]
    # As in filter_nodes: a node state scores a one-bitstream pod once per clock step.
    key = f"score|{demand.single[0]}|{demand.single[1]}|{demand.unnamed}|{weights}|{step}|{keep_version}"
    scores: list[tuple[str, int]] = []
    for name in names:
        node = lookup(name)
        if node is None:
            scores.append((name, neutral))
            continue
        memo = node.memo
        score = memo.get(key)
        if score is None:
            score = score_single(demand, node, weights, now, keep)
            remember(memo, key, score)
        scores.append((name, score))  # type: ignore[arg-type]
    return scores

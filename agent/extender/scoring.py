"""Filter and score: pure functions of a pod's demand and one node's published state.

Filter fails a node only on hard facts (bitstream not programmable, too few healthy slots).
Score (0..10): the mean over the slots the pod wants of ``loaded``, ``empty`` or, to overwrite
a loaded slot, ``empty - (empty - evict) x recency``; 0 when the pod does not fit. See docs/scoring.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agent.extender.demand import PodDemand
from agent.extender.nodestate import LoadedSlot, NodeSlots

MAX_SCORE = 10
#: Taken off a node's score when it must pull a bitstream the pod names (declared, not in its catalog).
DOWNLOAD_PENALTY = 1
#: A loaded slot unused for this long is worth the full ``evict`` weight.
LRU_HORIZON_S = 3600.0
#: How much of a loaded slot's value is its own recency when a caller values its content too.
RECENCY_SHARE = 0.5
#: No value of any content (the extender's own scoring: recency alone).
NO_VALUES: Mapping[str, float] = {}

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


def filter_nodes(demand: PodDemand, names: Iterable[str], lookup: NodeLookup) -> FilterOutcome:
    passed: list[str] = []
    failed: dict[str, str] = {}
    if not demand.by_bitstream:
        return FilterOutcome(list(names), failed)
    for name in names:
        reason = check_node(demand, lookup(name))
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return FilterOutcome(passed, failed)


def check_node(demand: PodDemand, node: NodeSlots | None) -> str | None:
    """Why the pod cannot run on this node at all (hard facts only); None when it can, or nothing is known."""
    if node is None or not demand.by_bitstream:
        return None
    missing = sorted(name for name in demand.by_bitstream if name not in node.bitstreams)
    if missing:
        names = ", ".join(f'"{name}"' for name in missing)
        return f"the node's catalog has no {'bitstream' if len(missing) == 1 else 'bitstreams'} {names}"
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


def score_node(
    demand: PodDemand,
    node: NodeSlots | None,
    weights: ScoreWeights,
    now: float,
    keep: Mapping[str, float] = NO_VALUES,
    promised: int = 0,
) -> int:
    """0..10 for placing the pod on this node. ``promised``: free copies of its one bitstream promised to others."""
    if node is None or not demand.by_bitstream:
        return weights.neutral
    if demand.one_slot is not None and not promised:
        return one_slot_score(demand.one_slot, node, weights, now, keep)[0]
    total = 0.0
    hits_taken: dict[str, int] = {}
    missing: dict[str, int] = {}
    for name, count in demand.by_bitstream.items():
        platform = node.bitstreams.get(name)
        if platform is None:
            return 0
        hits = max(0, min(count, node.free_loaded.get((name, platform), 0) - promised))
        hits_taken[name] = hits + promised
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
            # the slots counted as hits (or promised) are not up for eviction
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
    score = max(0, min(MAX_SCORE, math.floor(total / sum(demand.by_bitstream.values()) + 0.5)))
    if node.downloads and not node.downloads.isdisjoint(demand.by_bitstream):
        return max(0, score - DOWNLOAD_PENALTY)
    return score


def one_slot_score(
    bitstream: str,
    node: NodeSlots,
    weights: ScoreWeights,
    now: float,
    keep: Mapping[str, float] = NO_VALUES,
    promised: int = 0,
) -> tuple[int, bool]:
    """:func:`score_node` of a pod asking one slot of ``bitstream`` and nothing else, ``promised`` of the node's
    free copies of it promised to others, in fewer steps; and whether the score lasts as long as the node's state
    (an overwrite's moves with the slot's age until the LRU horizon, and with the cluster's values)."""
    platform = node.bitstreams.get(bitstream)
    if platform is None or node.free <= promised:  # not programmable here, or no slot left for it
        return 0, True
    lasting = True
    if node.free_loaded.get((bitstream, platform), 0) > promised:
        score = weights.loaded
    elif node.free_empty.get(platform):
        score = weights.empty
    else:  # the free loaded slots but the promised copies, least recently used first
        skip, reusable = promised, []
        for slot in node.reusable.get(platform, ()):
            if skip and slot.bitstream == bitstream:
                skip -= 1
            else:
                reusable.append(slot)
        if not reusable:
            return 0, True
        if keep:
            best, lasting = max(overwrite_score(slot, weights, now, keep) for slot in reusable), False
        else:  # the first is the cheapest to overwrite
            best, last = overwrite_score(reusable[0], weights, now, keep), reusable[0].last_used
            lasting = last <= 0 or now - last >= LRU_HORIZON_S
        score = max(0, min(MAX_SCORE, math.floor(best + 0.5)))
    return (max(0, score - DOWNLOAD_PENALTY) if node.downloads and bitstream in node.downloads else score), lasting


def overwrite_score(slot: LoadedSlot, weights: ScoreWeights, now: float, keep: Mapping[str, float]) -> float:
    """``empty`` for a slot whose content nobody is likely to want soon, down to ``evict``."""
    recency = 0.0 if slot.last_used <= 0 else 1.0 - min(1.0, max(0.0, now - slot.last_used) / LRU_HORIZON_S)
    if keep:
        cluster = keep.get(slot.bitstream, 0.0) if slot.bitstream is not None else 0.0
        recency = RECENCY_SHARE * recency + (1.0 - RECENCY_SHARE) * cluster
    return weights.empty - (weights.empty - weights.evict) * recency

"""Prioritize for one-slot pods from per-platform scores every bitstream shares: no work per node per call.

Nearly every pod asks one slot of one bitstream, and for such a pod a node scores
``loaded`` when one of its free slots holds the bitstream, else its **base** for the
bitstream's platform (``scoring.base_score``: ``empty`` when a free slot of that
platform holds nothing, else what its cheapest overwrite is worth), less
``DOWNLOAD_PENALTY`` when the node must pull the file first, and 0 when its catalog
cannot program it. The base does not depend on the bitstream. So this index keeps,
over every node of the cache:

* per platform, every node's base, with the lowest base and the nodes above it
  (:class:`PlatformBases`);
* per (bitstream, platform), the nodes with a free slot holding it (the hits);
* the distinct catalogs (what each node can program, and what it must pull first),
  counted: in most clusters a bitstream means the same platform and the same
  penalty on every node, whatever else the catalogs hold.

When every node agrees on the bitstream's platform and penalty and the scheduler asks
only about nodes the cache knows (the common case), and the call's floor is the
platform's lowest base (nearly always: some name asked sits at it), the answer is one
lookup per name into entries kept per node as JSON text (:class:`PlatformBases`), the
few hits put in, joined: C-level passes, no Python step and no encoding per name,
whether few names stand out or most do (as when the cluster's values spread the
bases). Any other floor, or a download penalty, takes a slower path with the same
result. The answer equals scoring every name and shifting as
:mod:`agent.extender.scoretable` does (the floor left out); kube-scheduler adds the
scores up per node, so the order carries nothing. When the catalogs disagree or a name
is unknown, :meth:`OneSlotIndex.prioritize` returns None and the caller scores per name.

The index follows the node cache's change log (a changed node is taken out and put
back), the cluster's values (bases that depend on them, those of nodes that would
overwrite, are worked out again when ``keep_version`` changes) and the clock (in
steps of ``CLOCK_STEP_S``; only bases of nodes whose free slots were used within
``LRU_HORIZON_S`` age). A new generation of the cache (a relist, new declarations)
rebuilds it, about 10 ms per 1000 nodes when nodes share catalogs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from agent.extender.nodestate import NodeSlots
from agent.extender.scoretable import Answer, ChangeLog, EncodedScores, Scores
from agent.extender.scoring import CLOCK_STEP_S, DOWNLOAD_PENALTY, LRU_HORIZON_S, MAX_SCORE, ScoreWeights, base_score
from agent.extender.wire import priority_entry

#: A node's catalog as the index tells them apart: the identity of its ``bitstreams`` mapping (nodes that
#: publish the same catalog share one, see ``nodestate``) and what it must pull first.
CatalogKey = tuple[int, frozenset[str]]
_NO_HITS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Entry:
    """What the index holds for one node, so that it can be taken out again."""

    node: NodeSlots
    platforms: tuple[str, ...]
    hits: tuple[tuple[str, str], ...]
    catalog: CatalogKey


@dataclass(slots=True)
class _Group:
    """The nodes with one catalog: its mapping (kept, so that its id stays its own) and how many."""

    mapping: Mapping[str, str]
    nodes: int = 1


class EntryTexts:
    """``{"Host":name,"Score":score}`` as JSON text, made once per name and score and kept (at most 11 per node)."""

    def __init__(self) -> None:
        self._by_score: dict[int, dict[str, str]] = {}

    def of(self, names: Iterable[str], score: int) -> list[str]:
        texts = self._by_score.get(score)
        if texts is None:
            texts = self._by_score[score] = {}
        names = list(names)
        for name in names:
            if name not in texts:
                texts[name] = priority_entry(name, score)
        return list(map(texts.__getitem__, names))

    def forget(self, name: str) -> None:
        """A node that left the cache (so that the texts stay bounded by the nodes there are)."""
        for texts in self._by_score.values():
            texts.pop(name, None)


class PlatformBases:
    """Every node's base for one platform: the lowest base, the nodes at it, and the others with theirs.

    ``shifted`` holds, for every node, its answer entry as JSON text when the lowest base
    is a call's floor (the common case): ``{"Host":name,"Score":base - low}`` for a node
    above it, ``""`` for one at it (left out). A call then looks each name up once and
    joins the entries that are not empty.
    """

    __slots__ = ("above", "low", "lows", "shifted", "texts")

    def __init__(self, texts: EntryTexts) -> None:
        self.texts = texts
        self.low = MAX_SCORE + 1
        self.lows: set[str] = set()
        self.above: dict[str, int] = {}
        self.shifted: dict[str, str] = {}

    def put(self, name: str, base: int) -> None:
        if base > self.low:
            self.above[name] = base
            (self.shifted[name],) = self.texts.of((name,), base - self.low)
        elif base == self.low:
            self.lows.add(name)
            self.shifted[name] = ""
        else:  # a new lowest base: the nodes at the old one are above it now
            self.above.update(dict.fromkeys(self.lows, self.low))
            self.low, self.lows = base, {name}
            self._shift()

    def drop(self, name: str) -> None:
        if self.shifted.pop(name, None) is None:
            return
        if self.above.pop(name, None) is not None:
            return
        self.lows.discard(name)
        if not self.lows and self.above:  # the lowest ones are gone: the next lowest is the new low
            self.low = min(self.above.values())
            self.lows = {n for n, base in self.above.items() if base == self.low}
            for n in self.lows:
                del self.above[n]
            self._shift()
        elif not self.lows:
            self.low = MAX_SCORE + 1

    def _shift(self) -> None:
        low = self.low
        by_score: dict[int, list[str]] = {}
        for name, base in self.above.items():
            by_score.setdefault(base - low, []).append(name)
        self.shifted = {}
        for score, names in by_score.items():
            self.shifted.update(zip(names, self.texts.of(names, score), strict=True))
        self.shifted.update(dict.fromkeys(self.lows, ""))


class OneSlotIndex:
    """Per-platform bases, hits and catalogs over the node cache, for one-slot pods (module docstring)."""

    def __init__(self, weights: ScoreWeights) -> None:
        self._weights = weights
        self._cache: ChangeLog | None = None
        self._generation = -1
        self._seen = 0
        self._keep_version = -1
        self._step = -1
        self._keep: Mapping[str, float] = {}
        self._entries: dict[str, _Entry] = {}
        self._texts = EntryTexts()
        self._bases: dict[str, PlatformBases] = {}
        self._hits: dict[tuple[str, str], set[str]] = {}
        self._catalogs: dict[CatalogKey, _Group] = {}
        #: Bitstream -> (platform or None, penalty) when every catalog agrees; None when they differ.
        self._agreed: dict[str, tuple[str | None, int] | None] = {}
        #: Nodes whose base depends on the cluster's values (they would overwrite), by name.
        self._valued: set[str] = set()
        #: Nodes whose base depends on the clock step (a free slot used within LRU_HORIZON_S).
        self._ageing: set[str] = set()

    def prioritize(
        self,
        cache: ChangeLog,
        bitstream: str,
        names: Sequence[str],
        keep: Mapping[str, float],
        keep_version: int,
        now: float,
    ) -> Answer | None:
        """The shifted scores of ``names`` for a pod asking one slot of ``bitstream``; None when the
        catalogs disagree about it or a name is not in the cache (then score per name)."""
        self._sync(cache, keep, keep_version, int(now // CLOCK_STEP_S))
        agreed = self._agreement(bitstream)
        if agreed is None:
            return None
        platform, penalty = agreed
        bases = self._bases.get(platform) if platform is not None else None
        if platform is None or bases is None:  # no node can program it: every known node asked scores 0
            return [] if all(map(self._entries.__contains__, names)) else None
        lows = bases.lows
        hits = self._hits.get((bitstream, platform), _NO_HITS)
        entries = list(map(bases.shifted.get, names))  # the one pass over the names (C-level)
        if None in entries:
            return None  # a node without published state: neutral, scored per name
        hits = hits.intersection(names)
        if not penalty:
            loaded = self._weights.loaded - bases.low
            at_low = entries.count("") - sum(1 for name in hits if name in lows)
            if at_low and loaded >= 0:  # the lowest base is the floor (a name at it holds no copy)
                if hits:
                    texts = dict(zip(names, entries, strict=True))
                    texts.update(dict.fromkeys(hits, ""))
                    fragments = list(filter(None, texts.values()))
                    if loaded:
                        fragments.extend(self._texts.of(hits, loaded))
                    return EncodedScores(fragments)
                return EncodedScores(list(filter(None, entries)))
        return self._general(names, bases, hits, penalty)

    def _general(self, names: Sequence[str], bases: PlatformBases, hits: AbstractSet[str], penalty: int) -> Scores:
        """Any penalty, and any floor: the one-slot scores of ``names`` (every one known), shifted."""
        lows, above = bases.lows, bases.above
        odd = [name for name in names if name not in lows]
        loaded = max(0, self._weights.loaded - penalty)
        rest = max(0, bases.low - penalty)  # a node at the lowest base without a copy (above: no clamp needed)
        plain = len(names) - len(odd) - sum(1 for name in hits if name in lows)
        scored: dict[str, int] = dict(zip(odd, map(above.__getitem__, odd), strict=True))
        for name in hits:
            scored.pop(name, None)
        floor = min(
            min(scored.values(), default=MAX_SCORE + 1) - penalty,
            rest if plain else MAX_SCORE + 1,
            loaded if hits else MAX_SCORE + 1,
        )
        if floor > MAX_SCORE:
            return []  # no names
        shift = penalty + floor
        answer = list(zip(scored, map(shift.__rsub__, scored.values()), strict=True))
        if not plain or rest != bases.low - penalty:  # the floor may be among them (or clamped to it): left out
            answer = [entry for entry in answer if entry[1]]
        if loaded != floor:
            answer.extend((name, loaded - floor) for name in hits)
        if plain and rest > floor:  # the nodes at the lowest base stand out too (weights where loaded < empty)
            answer.extend((name, rest - floor) for name in names if name in lows and name not in hits)
        return answer

    # --- keeping current with the cache, the cluster's values and the clock ----------------

    def _sync(self, cache: ChangeLog, keep: Mapping[str, float], keep_version: int, step: int) -> None:
        try:
            self._follow(cache, keep, keep_version, step)
        except BaseException:
            self._cache = None  # half applied: the next call builds it afresh
            raise

    def _follow(self, cache: ChangeLog, keep: Mapping[str, float], keep_version: int, step: int) -> None:
        if cache is not self._cache or cache.generation != self._generation:
            self._rebuild(cache, keep, keep_version, step)
            return
        changes = cache.changes
        if self._seen < len(changes):
            nodes = cache.nodes
            for name in set(changes[self._seen :]):
                self._remove(name)
                node = nodes.get(name)
                if node is not None:
                    self._add(node)
                else:
                    self._texts.forget(name)
            self._seen = len(changes)
        rebase: set[str] = set()
        if keep_version != self._keep_version:
            self._keep, self._keep_version = keep, keep_version
            rebase.update(self._valued)
        if step != self._step:
            self._step = step
            rebase.update(self._ageing)
        for name in rebase:  # the same node, a new clock step or new cluster values: only its bases change
            entry = self._entries[name]
            self._put_bases(entry.node, entry.platforms, replace=True)

    def _rebuild(self, cache: ChangeLog, keep: Mapping[str, float], keep_version: int, step: int) -> None:
        self._cache, self._generation, self._seen = cache, cache.generation, len(cache.changes)
        self._keep, self._keep_version, self._step = keep, keep_version, step
        self._entries, self._bases, self._hits = {}, {}, {}
        self._texts = EntryTexts()
        self._catalogs, self._agreed = {}, {}
        self._valued, self._ageing = set(), set()
        for node in cache.nodes.values():
            self._add(node)

    def _put_bases(self, node: NodeSlots, platforms: tuple[str, ...], *, replace: bool = False) -> None:
        name = node.name
        now = float(self._step * CLOCK_STEP_S)
        for platform in platforms:
            table = self._bases.get(platform)
            if table is None:
                table = self._bases[platform] = PlatformBases(self._texts)
            elif replace:
                table.drop(name)
            table.put(name, base_score(node, platform, self._weights, now, self._keep))
        if node.recent_use > now - LRU_HORIZON_S:
            self._ageing.add(name)
        else:
            self._ageing.discard(name)

    def _add(self, node: NodeSlots) -> None:
        name = node.name
        platforms = tuple(set(node.bitstreams.values()))
        self._put_bases(node, platforms)
        if any(not node.free_empty.get(p) and node.reusable.get(p) for p in platforms):
            self._valued.add(name)
        hits = tuple(key for key, count in node.free_loaded.items() if count > 0)
        for key in hits:
            self._hits.setdefault(key, set()).add(name)
        catalog: CatalogKey = (id(node.bitstreams), node.downloads)
        group = self._catalogs.get(catalog)
        if group is None:
            self._catalogs[catalog] = _Group(node.bitstreams)
            self._agreed.clear()
        else:
            group.nodes += 1
        self._entries[name] = _Entry(node, platforms, hits, catalog)

    def _remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is None:
            return
        for platform in entry.platforms:
            self._bases[platform].drop(name)
        for key in entry.hits:
            holders = self._hits[key]
            holders.discard(name)
            if not holders:
                del self._hits[key]
        self._valued.discard(name)
        self._ageing.discard(name)
        group = self._catalogs[entry.catalog]
        group.nodes -= 1
        if not group.nodes:
            del self._catalogs[entry.catalog]
            self._agreed.clear()

    def _agreement(self, bitstream: str) -> tuple[str | None, int] | None:
        """(platform, penalty) of ``bitstream`` when every catalog says the same, else None."""
        if bitstream in self._agreed:
            return self._agreed[bitstream]
        seen = {
            (group.mapping.get(bitstream), DOWNLOAD_PENALTY if bitstream in downloads else 0)
            for (_, downloads), group in self._catalogs.items()
        }
        agreed = next(iter(seen)) if len(seen) == 1 else None
        self._agreed[bitstream] = agreed
        return agreed

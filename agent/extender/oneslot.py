"""Prioritize for one-slot pods from per-platform scores every bitstream shares: no work per node per call.

Nearly every pod asks one slot of one bitstream, and for such a pod a node scores
``loaded`` when one of its free slots holds the bitstream, else its **base** for the
bitstream's platform (``scoring.base_score``: ``empty`` when a free slot of that
platform holds nothing, else what its cheapest overwrite is worth), less
``DOWNLOAD_PENALTY`` when the node must pull the file first, and 0 when its catalog
cannot program it. The base does not depend on the bitstream. So this index keeps,
over every node of the cache:

* per platform, every node's rank: its base and its packing for a one-slot pod
  (``NodeSlots.packing``) as one integer (base times
  :data:`~agent.extender.scoretable.RANK_SCALE` plus packing);
* per (bitstream, platform), the nodes with a free slot holding it (the hits);
* the distinct catalogs (what each node can program, and what it must pull first),
  counted: in most clusters a bitstream means the same platform and the same
  penalty on every node, whatever else the catalogs hold.

When every node agrees on the bitstream's platform and penalty (the common case), a
call takes the hits among the names asked (probing the bitstream's holders with the
names), and walks the platform's nodes grouped by rank (:mod:`agent.extender.rankwalk`)
for the floor and the best ``limit``: no lookup of each name in a table of every node
(at 5000 nodes those cost more than all the rest, their memory being out of the CPU's
caches), and no set of the names asked. The
answer equals scoring every name, shifting and keeping the best entries as
:mod:`agent.extender.scoretable` does. For a bitstream every node must pull first, the
names are looked up one by one. When the catalogs disagree, or a name asked is one the node watch reported without
published state (``NodeCache.unpublished``: it scores ``neutral``),
:meth:`OneSlotIndex.prioritize` returns None and the caller scores per name. That check
is skipped in a cluster whose nodes all publish.
A name the watch never reported (a node created a moment ago) scores the floor.

The index follows the node cache's change log (a changed node is taken out and put
back), the cluster's values (bases that depend on them, those of nodes that would
overwrite, are worked out again when ``keep_version`` changes) and the clock (in
steps of ``CLOCK_STEP_S``; only bases of nodes whose free slots were used within
``LRU_HORIZON_S`` age). A new generation of the cache (a relist, new declarations)
rebuilds it, about 10 ms per 1000 nodes when nodes share catalogs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from agent.extender import sample
from agent.extender.drascoring import dra_base
from agent.extender.nodestate import NodeSlots
from agent.extender.rankwalk import RankedNodes, best_of_asked, listed
from agent.extender.sample import AskedNames
from agent.extender.scoretable import RANK_SCALE, ChangeLog, Scores, best_ranked
from agent.extender.scoring import CLOCK_STEP_S, DOWNLOAD_PENALTY, LRU_HORIZON_S, ScoreWeights, base_score

#: A node's catalog as the index tells them apart: the identity of its ``bitstreams`` mapping (nodes that
#: publish the same catalog share one, see ``nodestate``) and what it must pull first.
CatalogKey = tuple[int, frozenset[str]]


@dataclass(frozen=True, slots=True)
class _Entry:
    """What the index holds for one node, so that it can be taken out again."""

    node: NodeSlots
    platforms: tuple[str, ...]
    hits: tuple[tuple[str, str], ...]
    catalog: CatalogKey
    #: The bitstreams whose cluster values its bases depend on (the contents it would overwrite).
    valued_by: tuple[str, ...]


@dataclass(slots=True)
class _Group:
    """The nodes with one catalog: its mapping (kept, so that its id stays its own) and how many."""

    mapping: Mapping[str, str]
    nodes: int = 1


class CompiledTables(NamedTuple):
    """What ``sample.answer`` ranks a one-slot pod's names with (``OneSlotIndex.tables``)."""

    #: The platform's ranks of every node; None: no node can program the bitstream (the answer is empty).
    base: sample.RankTable | None
    #: The nodes with a free copy, at their rank as holders; None: none.
    lifted: sample.RankTable | None
    #: The nodes whose free copies are all promised (they rank at their base); None: none.
    skip: sample.RankTable | None
    #: The nodes without published state: a call that asks about one is answered per name; None: none.
    unknown: sample.RankTable | None


#: One int object per rank value (at most 11 x 101 of them): the lookups of a call then touch a few
#: objects that stay in the CPU's caches, not one per node.
_SHARED_RANKS: dict[int, int] = {}


def _hashed(shadowed: Collection[str]) -> tuple[bool, sample.RankTable | None]:
    """Whether the compiled reader can skip the promised nodes ``shadowed`` (none, or kept by their hashes), and
    their table (None when there are none)."""
    if isinstance(shadowed, sample.HashedNames) and shadowed.table is not None:
        return True, shadowed.table if shadowed else None
    return not shadowed, None


def _shared(rank: int) -> int:
    return _SHARED_RANKS.setdefault(rank, rank)


def _less(key: int, penalty: int) -> int:
    """A rank with ``penalty`` taken off its score (not below 0), its packing kept."""
    return max(0, key // RANK_SCALE - penalty) * RANK_SCALE + key % RANK_SCALE


class OneSlotIndex:
    """Per-platform bases, hits and catalogs over the node cache, for one-slot pods (module docstring)."""

    def __init__(self, weights: ScoreWeights, compiled: bool = sample.COMPILED) -> None:
        self._weights = weights
        #: Whether names read from the request's bytes (``sample.AskedNames``) are ranked by the compiled reader.
        self._compiled = compiled
        self._cache: ChangeLog | None = None
        self._generation = -1
        self._seen = 0
        self._keep_version = -1
        self._step = -1
        #: Times the index was built afresh (its tables are new objects then).
        self.builds = 0
        self._keep: Mapping[str, float] = {}
        self._entries: dict[str, _Entry] = {}
        #: Platform -> node -> its base times RANK_SCALE plus its packing for a one-slot pod.
        self._ranks: dict[str, RankedNodes] = {}
        #: The same for a one-slot DRA pod: the base is what the slot the allocator takes is worth (``dra_base``).
        self._dra_ranks: dict[str, RankedNodes] = {}
        #: Whether a DRA pod was asked about: until then the DRA bases are not worked out (device-plugin
        #: clusters pay nothing for them); the first one rebuilds the index with them.
        self._with_dra = False
        #: (bitstream, platform) -> the nodes with a free slot holding it, each with its rank there for a one-slot
        #: pod (the ``loaded`` score and its packing). The names asked are probed against it (a small table, its
        #: entries' hashes kept in it: a name that holds nothing is told apart without reading any holder's
        #: string), and a holder found is ranked from the entry just read, not from the platform's table of
        #: every node, whose entries are out of the CPU's caches (a miss each, 15 % of a call, flushed).
        self._hits: dict[tuple[str, str], dict[str, int]] = {}
        #: The same holders and ranks for the compiled reader (kept only when it is used).
        self._hit_tables: dict[tuple[str, str], sample.RankTable] = {}
        #: The nodes the watch reported without published state (``NodeCache.unpublished``), for the compiled
        #: reader: a call that asks about one of them is answered per name.
        self._unpublished: sample.RankTable | None = None
        self._catalogs: dict[CatalogKey, _Group] = {}
        #: Bitstream -> (platform or None, penalty) when every catalog agrees; None when they differ.
        self._agreed: dict[str, tuple[str | None, int] | None] = {}
        #: Bitstream -> the nodes whose bases depend on its cluster value (they would overwrite a copy of it).
        self._valued_by: dict[str, set[str]] = {}
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
        limit: int,
        shadowed: Collection[str] = frozenset(),
        dra: Callable[[str], int] | None = None,
        tops: list[str] | None = None,
    ) -> Scores | None:
        """The best ``limit`` shifted scores of ``names`` for a pod asking one slot of ``bitstream``;
        None when the catalogs disagree about it (then score per name). Nodes in ``shadowed`` score as if
        their free copies of it were gone (promised to other pods: ``agent.extender.promises``).

        ``dra``: the pod is a DRA pod (``agent.extender.drascoring``): a node without a free copy scores what the
        slot the allocator takes there is worth, and a shadowed node scores ``dra(name)``. ``tops`` receives the
        names that tie for the top of the answer (``rankwalk.best_of_asked``)."""
        if dra is not None and not self._with_dra:
            self._with_dra, self._cache = True, None  # rebuilt below, with the DRA bases
        self._sync(cache, keep, keep_version, int(now // CLOCK_STEP_S))
        agreed = self._agreement(bitstream)
        if agreed is None:
            return None
        platform, penalty = agreed
        tables = self._ranks if dra is None else self._dra_ranks
        ranks = tables.get(platform) if platform is not None else None
        unpublished = cache.unpublished
        if unpublished and not unpublished.isdisjoint(names):  # a node without published state: neutral, per name
            return None
        if platform is None or ranks is None:  # no node can program it: every name asked scores 0
            return [] if dra is None else None  # a DRA answer may still list the best packed: per name
        if penalty:  # every node must pull the file first (rarely): the ranks shift unevenly, per name
            return self._per_name(ranks, bitstream, platform, penalty, names, limit, shadowed, dra)
        base = ranks.table
        hashed, skip = _hashed(shadowed)
        if (
            base is not None
            and dra is None
            and 0 < limit <= sample.MAX_LIMIT
            and hashed
            and isinstance(names, AskedNames)
        ):
            # one pass over the request's bytes, no string per name (``agent.extender.sample``)
            lifted_table = self._hit_tables.get((bitstream, platform))
            return listed(sample.best_of(names.body, names.start, base, lifted_table, skip, limit), tops)
        lifted: dict[str, int] = {}
        holders = self._hits.get((bitstream, platform))
        if holders:
            # walks the names, probing the holders (no holder read unless asked): those asked, in the order asked
            found = list(filter(holders.__contains__, names))
            if shadowed and any(map(shadowed.__contains__, found)):  # copies promised to other pods
                for name in found:
                    if name not in shadowed:
                        lifted[name] = holders[name]  # a free copy here
                    elif dra is not None:  # the allocator takes another slot there: scored on its own, packing kept
                        lifted[name] = dra(name) * RANK_SCALE + holders[name] % RANK_SCALE
            else:
                lifted.update(zip(found, map(holders.__getitem__, found), strict=True))  # a free copy here
        return best_of_asked(ranks, names, lifted, limit, pack_ties=dra is not None, tops=tops)

    def tables(
        self,
        cache: ChangeLog,
        bitstream: str,
        keep: Mapping[str, float],
        keep_version: int,
        now: float,
        limit: int,
        shadowed: Collection[str] = frozenset(),
    ) -> CompiledTables | None:
        """The compiled tables for a (device-plugin) pod asking one slot of ``bitstream``, its answer then made
        from the request's bytes alone (``sample.answer``) equal to :meth:`prioritize`'s; None when that answer
        needs more: the catalogs disagree, every node must pull the bitstream, ``limit`` is beyond the reader's,
        or the promised nodes are not kept by their hashes. Nodes without published state are passed as
        ``unknown``: ``sample.answer`` declines a call that asks about one of them."""
        self._sync(cache, keep, keep_version, int(now // CLOCK_STEP_S))
        agreed = self._agreement(bitstream)
        if agreed is None:
            return None
        platform, penalty = agreed
        ranks = self._ranks.get(platform) if platform is not None else None
        if platform is None or ranks is None:  # no node can program it: every name asked scores 0
            return CompiledTables(None, None, None, None) if not cache.unpublished else None
        hashed, skip = _hashed(shadowed)
        if penalty or ranks.table is None or not 0 < limit <= sample.MAX_LIMIT or not hashed:
            return None
        unknown = self._unpublished if cache.unpublished else None
        return CompiledTables(ranks.table, self._hit_tables.get((bitstream, platform)), skip, unknown)

    def step_span(self) -> tuple[float, float]:
        """The clock's span in which the bases hold as last followed: [start, end) of the clock step."""
        return self._step * CLOCK_STEP_S, (self._step + 1) * CLOCK_STEP_S

    def _per_name(
        self,
        table: RankedNodes,
        bitstream: str,
        platform: str,
        penalty: int,
        names: Sequence[str],
        limit: int,
        shadowed: Collection[str],
        dra: Callable[[str], int] | None,
    ) -> Scores:
        """Every name looked up: for a bitstream every node must pull first (its penalty clamps at 0)."""
        held = table.ranks
        known = [name for name in names if name in held]
        keys = [_less(held[name], penalty) for name in known]
        loaded = max(0, self._weights.loaded - penalty) * RANK_SCALE
        hits = self._hits.get((bitstream, platform), {})
        for at, name in enumerate(known):
            if name in hits:
                if shadowed and name in shadowed:
                    if dra is not None:
                        keys[at] = dra(name) * RANK_SCALE + keys[at] % RANK_SCALE
                    continue
                keys[at] = loaded + keys[at] % RANK_SCALE  # a free copy here: its packing kept
        return best_ranked(known, keys, limit, pack_ties=dra is not None)

    # --- keeping current with the cache, the cluster's values and the clock ----------------

    def follow(self, cache: ChangeLog, keep: Mapping[str, float], keep_version: int, now: float) -> None:
        """Bring the index up to date now (built afresh for a new cache or generation), so that the next
        call finds nothing to do: after a list of every node, the build (about 50 ms at 5000 nodes) is then not
        made inside a scheduling call."""
        self._sync(cache, keep, keep_version, int(now // CLOCK_STEP_S))

    def _sync(self, cache: ChangeLog, keep: Mapping[str, float], keep_version: int, step: int) -> None:
        if (  # nothing to follow (nearly every call)
            cache is self._cache
            and cache.generation == self._generation
            and self._seen == len(cache.changes)
            and keep_version == self._keep_version
            and step == self._step
        ):
            return
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
            unpublished = self._unpublished
            for name in set(changes[self._seen :]):
                self._remove(name)
                node = nodes.get(name)
                if node is not None:
                    self._add(node)
                if unpublished is not None:
                    if name in cache.unpublished:
                        unpublished.put(name, 0)
                    else:
                        unpublished.drop(name)
            self._seen = len(changes)
        rebase: set[str] = set()
        if keep_version != self._keep_version:  # only the nodes that would overwrite a bitstream whose value moved
            old, valued_by = self._keep, self._valued_by
            for bitstream in old.keys() | keep.keys():
                if old.get(bitstream, 0.0) != keep.get(bitstream, 0.0) and bitstream in valued_by:
                    rebase.update(valued_by[bitstream])
            self._keep, self._keep_version = keep, keep_version
        if step != self._step:
            self._step = step
            rebase.update(self._ageing)
        for name in rebase:  # the same node, a new clock step or new cluster values: only its bases change
            entry = self._entries[name]
            self._put_bases(entry.node, entry.platforms, entry.node.packing(1))

    def _rebuild(self, cache: ChangeLog, keep: Mapping[str, float], keep_version: int, step: int) -> None:
        self.builds += 1
        self._cache, self._generation, self._seen = cache, cache.generation, len(cache.changes)
        self._keep, self._keep_version, self._step = keep, keep_version, step
        self._entries, self._ranks, self._hits, self._dra_ranks = {}, {}, {}, {}
        self._hit_tables = {}
        self._catalogs, self._agreed = {}, {}
        self._valued_by, self._ageing = {}, set()
        for node in cache.nodes.values():
            self._add(node)
        if self._compiled:
            self._unpublished = sample.RankTable()
            for name in cache.unpublished:
                self._unpublished.put(name, 0)

    def _put_bases(self, node: NodeSlots, platforms: tuple[str, ...], packing: int) -> None:
        name = node.name
        now = float(self._step * CLOCK_STEP_S)
        for platform in platforms:
            rank = base_score(node, platform, self._weights, now, self._keep) * RANK_SCALE + packing
            self._table(self._ranks, platform, self._compiled).put(name, _shared(rank))
            if self._with_dra:
                rank = dra_base(node, platform, self._weights, now, self._keep) * RANK_SCALE + packing
                self._table(self._dra_ranks, platform, False).put(name, _shared(rank))
        if node.recent_use > now - LRU_HORIZON_S:
            self._ageing.add(name)
        else:
            self._ageing.discard(name)

    @staticmethod
    def _table(tables: dict[str, RankedNodes], platform: str, compiled: bool) -> RankedNodes:
        table = tables.get(platform)
        if table is None:
            table = tables[platform] = RankedNodes(compiled)
        return table

    def _add(self, node: NodeSlots) -> None:
        name = node.name
        platforms = tuple(set(node.bitstreams.values()))
        packing = node.packing(1)
        self._put_bases(node, platforms, packing)
        valued_by = self._keep_dependencies(node, platforms)
        for bitstream in valued_by:
            self._valued_by.setdefault(bitstream, set()).add(name)
        hits = tuple(key for key, count in node.free_loaded.items() if count > 0)
        lifted = _shared(self._weights.loaded * RANK_SCALE + packing)
        for key in hits:
            self._hits.setdefault(key, {})[name] = lifted
            if self._compiled:
                table = self._hit_tables.get(key)
                if table is None:
                    table = self._hit_tables[key] = sample.RankTable()
                table.put(name, lifted)
        catalog: CatalogKey = (id(node.bitstreams), node.downloads)
        group = self._catalogs.get(catalog)
        if group is None:
            self._catalogs[catalog] = _Group(node.bitstreams)
            self._agreed.clear()
        else:
            group.nodes += 1
        self._entries[name] = _Entry(node, platforms, hits, catalog, valued_by)

    def _keep_dependencies(self, node: NodeSlots, platforms: tuple[str, ...]) -> tuple[str, ...]:
        """The bitstreams whose cluster values the node's bases read: those of the slots it would overwrite (no
        free empty slot of the platform), and for DRA pods that of the first free slot of each platform."""
        found: set[str] = set()
        for platform in platforms:
            if not node.free_empty.get(platform):
                found.update(slot.bitstream for slot in node.reusable.get(platform, ()) if slot.bitstream)
        if self._with_dra:
            for platform in platforms:
                first = next((slot for slot in node.free_order if slot.platform == platform), None)
                if first is not None and first.bitstream:
                    found.add(first.bitstream)
        return tuple(found)

    def _remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is None:
            return
        for tables in (self._ranks, self._dra_ranks) if self._with_dra else (self._ranks,):
            for platform in entry.platforms:
                ranks = tables[platform]
                ranks.drop(name)
                if not ranks:
                    del tables[platform]
        for key in entry.hits:
            holders = self._hits[key]
            del holders[name]
            if not holders:
                del self._hits[key]
            if self._compiled:
                table = self._hit_tables[key]
                table.drop(name)
                if not table:
                    del self._hit_tables[key]
        for bitstream in entry.valued_by:
            nodes = self._valued_by[bitstream]
            nodes.discard(name)
            if not nodes:
                del self._valued_by[bitstream]
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

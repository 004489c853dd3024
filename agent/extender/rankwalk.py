"""Nodes kept by rank, and the best of the names kube-scheduler asks about found by walking the ranks.

At 5000 nodes kube-scheduler asks about a sample of about 500 names per pod. Looking
each of them up in a table of every node touches 500 places in memory that the
scheduler, the API server and etcd push out of the CPU's caches between two calls:
measured in the bench (``bench/scheduler.py``), that lookup pass alone cost about
270 us per call. So :class:`RankedNodes` keeps the nodes of one platform grouped by
rank (score times ``RANK_SCALE`` plus packing, few distinct values), and
:func:`best_of_asked` answers by probing those groups with the names asked:

* the **floor** (the lowest score among the names asked, which kube-scheduler's
  reading of an answer makes 0) is the lowest rank group that holds a name asked
  (``isdisjoint`` stops at the first one it finds);
* the **best** are taken from the highest groups down, until ``limit`` are listed;
  of a group with more names asked than still wanted, the first in the order asked.

A few names rank otherwise for the pod at hand (``lifted``: a free copy of its
bitstream, or a promised copy taken off); they are passed with their ranks and take
part as if their group were that rank. A name the table does not hold (no published
state) is not in any group: it scores the floor (the caller checks the names asked against
the nodes known to be without state and scores per name when it finds one).

The names asked are always the side that is walked, and the groups the side that is
probed: no set of them is built (500 names make a 32 kB table, each byte of it a cache
miss to write), and a group's own nodes are not walked (CPython takes a reference to
each element it walks: one cache miss per node, in memory the other processes evicted).
On the requests of ``bench/extender_handler.py`` (5000 nodes, caches flushed between
calls, cachegrind) this took the handler from 6.4k to 5.7k last-level cache misses and
from 876k to 793k instructions per call.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from itertools import filterfalse, islice, repeat

from agent.extender import sample
from agent.extender.scoretable import RANK_SCALE, Scores


class RankedNodes:
    """Node -> rank, and rank -> the nodes at it, for one platform (and one kind of pod); with ``compiled``, the
    ranks also in a :class:`~agent.extender.sample.RankTable` for the compiled sample reader."""

    __slots__ = ("_order", "groups", "ranks", "table")

    def __init__(self, compiled: bool = False) -> None:
        self.ranks: dict[str, int] = {}
        self.groups: dict[int, set[str]] = {}
        self._order: list[int] | None = None
        self.table = sample.RankTable() if compiled else None

    def __len__(self) -> int:
        return len(self.ranks)

    def put(self, name: str, rank: int) -> None:
        old = self.ranks.get(name)
        if old == rank:
            return
        if old is not None:
            self._leave(name, old)
        self.ranks[name] = rank
        if self.table is not None:
            self.table.put(name, rank)
        group = self.groups.get(rank)
        if group is None:
            self.groups[rank] = {name}
            self._order = None
        else:
            group.add(name)

    def drop(self, name: str) -> None:
        old = self.ranks.pop(name, None)
        if old is not None:
            self._leave(name, old)
            if self.table is not None:
                self.table.drop(name)

    def order(self) -> list[int]:
        """The ranks held, best first."""
        if self._order is None:
            self._order = sorted(self.groups, reverse=True)
        return self._order

    def _leave(self, name: str, rank: int) -> None:
        group = self.groups[rank]
        group.discard(name)
        if not group:
            del self.groups[rank]
            self._order = None


def best_of_asked(
    table: RankedNodes,
    names: Sequence[str],
    lifted: Mapping[str, int],
    limit: int,
    *,
    pack_ties: bool = False,
    tops: list[str] | None = None,
) -> Scores:
    """The answer for ``names``: each listed name's score shifted to the floor, the floor left out, at most
    ``limit`` entries (0: all), the best by rank, ties in the order asked.
    ``lifted``: names asked that rank otherwise for this pod, with their ranks, in the order asked. ``pack_ties`` as for
    :func:`~agent.extender.scoretable.best_ranked`: when every name scores the floor but their packings
    differ, the best packed are listed at 1. ``tops``, when given, receives the names listed at the best rank
    (score and packing alike: the leading entries that tie for the top)."""
    lowest = _lowest(table, names, lifted)
    if lowest is None:
        return []
    floor = lowest // RANK_SCALE
    top = (floor + 1) * RANK_SCALE
    extra: dict[int, list[str]] = {}
    for name, rank in lifted.items():
        extra.setdefault(rank, []).append(name)
    picked: Scores = []
    # every rank held, best first: the table's (few: scores x packings) and the lifted names'
    ranks = sorted(extra.keys() | table.order(), reverse=True) if extra else table.order()
    groups = table.groups
    for rank in ranks:
        if 0 < limit <= len(picked) or rank < lowest:
            break
        need = limit - len(picked) if limit > 0 else len(names)
        if rank < top and (picked or not pack_ties or rank == lowest):
            break  # at the floor's score: left out, unless every name is and packing tells them apart
        # a name is listed once: a lifted name is taken out of its group, and the names asked are distinct
        found = _at_rank(groups.get(rank), extra.get(rank, ()), names, lifted, need)
        if rank < top:
            if found:
                picked.extend(zip(found, repeat(1)))
                if tops is not None:
                    tops.extend(found)
                break
            continue
        if not picked and tops is not None:
            tops.extend(found)
        picked.extend(zip(found, repeat(rank // RANK_SCALE - floor)))
    return picked


def listed(found: tuple[int | None, list[tuple[str, int]]], tops: list[str] | None = None) -> Scores:
    """The answer from what the compiled sample reader found (``sample.best_of``: the lowest rank among the
    names asked, and the best of them by rank then order asked), as :func:`best_of_asked` gives it: scores
    shifted to the floor, the floor left out. ``tops`` receives the names listed at the best rank."""
    lowest, best = found
    if lowest is None or not best:
        return []
    floor = lowest // RANK_SCALE
    top = (floor + 1) * RANK_SCALE
    first = best[0][1]
    if first < top:
        return []
    if tops is not None:
        tops.extend(name for name, rank in best if rank == first)
    return [(name, rank // RANK_SCALE - floor) for name, rank in best if rank >= top]


def _lowest(table: RankedNodes, names: Sequence[str], lifted: Mapping[str, int]) -> int | None:
    """The lowest rank among the names asked that the table holds; None when it holds none of them."""
    lowest = min(lifted.values()) if lifted else None
    groups = table.groups
    for rank in reversed(table.order()):
        if lowest is not None and rank >= lowest:
            break
        # the names asked in the group, in order (C-level: walks the names, probing the group)
        asked = filter(groups[rank].__contains__, names)
        first = next(asked, None)
        if first is None:
            continue
        if first in lifted and all(map(lifted.__contains__, asked)):  # all of them rank otherwise: stops at the
            continue  # first that does not
        return rank
    return lowest


def _at_rank(
    group: set[str] | None,
    extra: Sequence[str],
    names: Sequence[str],
    lifted: Mapping[str, int],
    need: int,
) -> list[str]:
    """The names asked at one rank, the group's (less the lifted) and ``extra`` (lifted names, in the order
    asked): all of them when they are ``need`` or fewer (a group's by name, lifted names alone in the order
    asked), else the first ``need`` in the order asked."""
    if group is None:  # lifted names only: in the order asked (``lifted``'s order), each once
        return list(extra[:need])
    elif len(group) <= len(names):
        found: set[str] = group.intersection(names)  # walks the names, probing the group
        if lifted:
            found.difference_update(lifted)
        found.update(extra)
    elif extra:  # a group larger than the sample, and lifted names at its rank (rare)
        wanted = set(extra)
        return _first(names, lambda n: (n in group and n not in lifted) or n in wanted, need, ())
    else:  # a group larger than the sample: the names asked, in order, until enough are found in it
        return _first(names, group.__contains__, need, lifted)
    if len(found) <= need:
        return sorted(found)  # all of them: no scan of the names, and the same order in every process
    return _first(names, found.__contains__, need, ())


def _first(names: Sequence[str], wanted: Callable[[str], bool], need: int, skip: Container[str]) -> list[str]:
    """The first ``need`` distinct names for which ``wanted`` holds and that are not in ``skip``, in order."""
    chosen: list[str] = []
    if need <= 0:
        return chosen
    # C-level: the names asked are distinct (kube-scheduler never repeats one), checked on what was taken
    chosen = list(islice(filterfalse(skip.__contains__, filter(wanted, names)), need))
    if len(set(chosen)) == len(chosen):
        return chosen
    chosen = []
    seen: set[str] = set()
    for name in filter(wanted, names):
        if name not in seen and name not in skip:
            seen.add(name)
            chosen.append(name)
            if len(chosen) >= need:
                break
    return chosen

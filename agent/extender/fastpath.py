"""When the compiled fast path may answer kube-scheduler's common call, and what is recorded after it did.

The common call, a prioritize request whose pod asks one slot of one bitstream, is
answered from tables the one-slot index and the promises keep (``ranking.ScoreBoard.
prioritize_body``). ``_fastpath.c`` answers it from the connection's bytes to the
response's bytes, with no Python between: Python framing, routing and bookkeeping
cost more CPU per call than the answer, inside kube-scheduler's scheduling cycle.

It answers only while its tables are what Python would find, so :class:`FastAnswers`:

* **arms** it after every one-slot answer Python made, with that bitstream's tables
  (``OneSlotIndex.tables``), for the node cache's state then (its change log, as a
  list and its length: any node event stops it) and for a span of the clock: the
  index's clock step, the cluster values' step (``ClusterFacts.fixed_until``), and the
  oldest promise's expiry. Each bitstream is added by the first Python answer for it;
  a call it cannot answer (another kind of pod, a node without published state, a pod
  asked about again, whose promise is released first) goes to Python, which arms it again.
  After a node event the node watch has the index and the promises follow it at once and
  arms it again for every bitstream it held (``ScoreBoard.follow_nodes``), outside any
  scheduling call;
* **disarms** it before any answer Python makes (a DRA pod, a multi-slot pod: those may
  rebuild the index or release promises) until the next one-slot answer arms it again,
  keeping the entries whose tables still hold: all of them unless the index was built
  afresh, but a bitstream whose table of fully promised nodes was made or dropped
  (``Promises.take_reshaped``);
* **records** what Python would have recorded in the call, once the answer is written:
  the pod counted in the request shares, and the copy promised to it. The compiled side does
  that itself (``_fastbooks.c``), into the board's own tables, which it is handed here
  (``FastPath.keep``): in the real-scheduler bench the twenty-odd Python calls it took cost
  about as much CPU per pod as the answer. It leaves the rare cases to :meth:`FastAnswers.record`.

Either way the answers, and the state after them, are the same (``tests/unit/extender/
test_fastpath.py`` drives both paths through the same calls).
"""

from __future__ import annotations

from collections import OrderedDict

from agent.extender import sample
from agent.extender.facts import CHANGE_MEMORY, ClusterFacts
from agent.extender.oneslot import CompiledTables, OneSlotIndex
from agent.extender.promises import Promises
from agent.extender.scoretable import ChangeLog


class FastAnswers:
    """A board's fast path (``sample.FastPath``), armed and recorded for (see the module docstring)."""

    def __init__(
        self,
        engine: sample.FastPath,
        facts: ClusterFacts,
        index: OneSlotIndex,
        promises: Promises | None,
        counted: OrderedDict[str, None],
        counted_limit: int,
    ) -> None:
        """``counted``: the board's pods counted in the request shares, ``counted_limit`` at most."""
        self.engine = engine
        self._facts = facts
        self._index = index
        self._promises = promises
        self._builds = index.builds
        #: The node cache it was last armed for: promises made by its answers are recorded against it.
        self._cache: ChangeLog | None = None
        books = promises.fast_books(self.record) if promises is not None else None
        engine.keep(counted, counted_limit, facts.unweighed, CHANGE_MEMORY, facts.weigh_noted, books)

    def disarm(self) -> None:
        self.engine.disarm()

    def arm(self, cache: ChangeLog, bitstream: str, tables: CompiledTables, now: float) -> None:
        """After Python answered a one-slot pod of ``bitstream`` from ``tables`` at ``now``: answer its calls."""
        engine, promises = self.engine, self._promises
        if tables.base is None:
            return
        if self._index.builds != self._builds:  # the index made its tables afresh: every entry holds old ones
            engine.clear()
            self._builds = self._index.builds
        self.forget_reshaped()
        since, until = self._index.step_span()
        until = min(until, self._facts.fixed_until())
        if promises is not None:
            until = min(until, promises.next_expiry())
        if not since <= now < until:
            return
        engine.arm(cache, since, until, promises.pods if promises is not None else None)
        engine.put(bitstream, tables.base, tables.lifted, tables.skip, tables.unknown)
        self._cache = cache

    def forget_reshaped(self) -> None:
        """Drop the bitstreams whose fully promised nodes' table was made or dropped (the entry holds the old)."""
        if self._promises is not None:
            for bitstream in self._promises.take_reshaped():
                self.engine.drop(bitstream)

    def record(self, pod: str, chosen: str, bitstream: str, now: float) -> None:
        """After the fast path answered: promise ``chosen``'s copy to ``pod`` (the compiled side calls this for
        the cases it leaves to Python, ``_fastbooks.c``)."""
        if self._promises is None or self._cache is None:
            return
        self._promises.promise(self._cache, pod, bitstream, chosen, now)
        self.forget_reshaped()

"""Cluster-wide facts for prioritize: how much the content of a free slot is worth to the cluster.

One node cannot tell whether the bitstream in its free slot is a spare copy or the
last free copy of one that pods keep asking for. The extender sees both: every pod it
scores, and every node's published slots. So it keeps

* a **request share** per bitstream: its part of the pods scored lately, decayed per
  request (half of the weight is in the last ``HALF_LIFE_REQUESTS`` pods), so that it
  means the same in a quiet cluster and a busy one, and follows popularity that drifts;
* the **free copies** of each bitstream (free healthy slots holding it), and the free
  healthy slots of each platform, counted over all nodes.

How much a free slot holding bitstream C is worth keeping: a free slot stays in the
cluster's cache for about as many pods as there are free slots of its platform
(``free``; each pod that misses overwrites one of them), and of those pods about
``mean = share * WINDOW_PER_FREE_SLOT * free`` ask for C. There are ``copies`` free
slots holding C to serve them, so overwriting one of them costs a reconfiguration
later when ``copies`` or more of those pods ask for C: with Poisson arrivals,
``p = P(N >= copies)``, N ~ Poisson(mean). That is near 0 for one of many spare copies,
or for a bitstream nobody asks for; near 1 for the last free copy of a popular one;
and a second copy is worth far less than the first (the earlier estimate,
``1 - exp(-mean / copies)``, valued every copy alike and kept spare copies of popular
bitstreams against the last copies of others). Prioritize mixes ``p`` with the slot's
own recency (see ``agent.extender.scoring``), because the two err on different
workloads: request shares follow popularity, recency follows bursts and drift faster,
and among slots that the shares value alike it overwrites the least recently used.

The table ``bitstream -> p`` is worked out again at most once per ``STEP_S``, rounded
to ``1 / LEVELS``, and its ``version`` changes only when a value in it does: that is
when remembered node scores (``agent.extender.ranking``) are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from agent.extender.nodestate import NodeSlots

#: Half of a bitstream's request weight comes from the last this many pods scored. On the workload grid
#: of bench/cluster_sim.py ((c) / clairvoyant reference, median and worst), 100 gives 1.110 / 1.37,
#: 150 gives 1.102 / 1.35, 200 gives 1.102 / 1.32, 400 gives 1.103 / 1.33 (and drift, point 25, 1.28
#: against 1.24).
HALF_LIFE_REQUESTS = 200.0
#: The pods ahead that a free copy is weighed against, per free slot of its platform in the cluster.
#: Chosen on the same grid ((c) / reference, median and worst of 26 points): 0.5 gives 1.127 / 1.36,
#: 1 gives 1.102 / 1.32, 2 gives 1.112 / 1.34. The earlier rule (a fixed window of 100 pods and
#: 1 - exp(-mean / copies)) gives 1.114 / 1.35 on the same simulation.
WINDOW_PER_FREE_SLOT = 1.0
#: The table is worked out again at most this often (seconds; on the grid 5 s gives 1.095 / 1.34, within
#: noise of 10 s, for twice the work; 60 s was worse with the earlier values, 1.16).
STEP_S = 10.0
#: Values are rounded to 1 / LEVELS, so that the table (and the scores built on it) changes only when it matters.
LEVELS = 20
#: Above this many expected requests, the Poisson tail is taken from the normal approximation.
_NORMAL_FROM = 50.0
#: Request weights are rescaled when the newest weight grows past this.
_RESCALE_AT = 1e100


class ClusterFacts:
    """Request shares and free copies, and what a free copy of each bitstream is worth (see the module docstring)."""

    def __init__(
        self,
        half_life_requests: float = HALF_LIFE_REQUESTS,
        window_per_free_slot: float = WINDOW_PER_FREE_SLOT,
        step_s: float = STEP_S,
    ) -> None:
        if half_life_requests <= 0 or window_per_free_slot <= 0:
            raise ValueError("half_life_requests and window_per_free_slot must be positive")
        self._window = window_per_free_slot
        self._growth = 2.0 ** (1.0 / half_life_requests)
        self._step_s = step_s
        self._next = 1.0  # the weight of the next request: each one weighs growth x the one before
        self._weights: dict[str, float] = {}
        self._total = 0.0
        self._requests = 0
        self._computed_at = -math.inf
        self._computed_requests = -1
        self._values: dict[str, float] = {}
        self.version = 0

    def note_request(self, bitstream: str) -> None:
        """A pod asking for ``bitstream`` was scored (call once per pod, not per retry if that is known)."""
        weight = self._next
        self._weights[bitstream] = self._weights.get(bitstream, 0.0) + weight
        self._total += weight
        self._requests += 1
        self._next = weight * self._growth
        if self._next > _RESCALE_AT:
            scale = 1.0 / self._next
            self._weights = {name: w * scale for name, w in self._weights.items() if w * scale > 1e-12}
            self._total *= scale
            self._next = 1.0

    def share(self, bitstream: str) -> float:
        """The bitstream's part of the pods scored lately (0..1)."""
        return self._weights.get(bitstream, 0.0) / self._total if self._total else 0.0

    def keep_values(self, nodes: Iterable[NodeSlots], now: float) -> Mapping[str, float]:
        """Bitstream -> how likely overwriting a free copy of it costs a reconfiguration later (0..1).

        A bitstream not listed is worth 0 (no pod asked for it lately). Worked out from
        ``nodes`` at most once per ``STEP_S``, and not again while no pod was scored since;
        ``version`` changes whenever the answer does.
        """
        if now < self._computed_at + self._step_s:
            return self._values
        self._computed_at = now
        if self._requests == self._computed_requests:
            return self._values
        self._computed_requests = self._requests
        copies, free = free_slots(nodes)
        values: dict[str, float] = {}
        for (bitstream, platform), count in copies.items():
            share = self.share(bitstream)
            if share > 0.0:
                asked = share * self._window * free.get(platform, 0)
                value = round(LEVELS * asked_at_least(count, asked)) / LEVELS
                if value > 0.0:
                    values[bitstream] = max(values.get(bitstream, 0.0), value)
        if values != self._values:
            self._values = values
            self.version += 1
        return self._values


def asked_at_least(copies: int, mean: float) -> float:
    """The chance that ``copies`` or more pods ask for a bitstream when ``mean`` are expected (Poisson).

    Summed term by term up to a mean of ``_NORMAL_FROM``; above it (where ``exp(-mean)``
    would soon underflow) the normal approximation with continuity correction, which is
    within 0.01 there: the values are rounded to ``1 / LEVELS`` anyway.
    """
    if copies <= 0:
        return 1.0
    if mean > _NORMAL_FROM:
        return 0.5 * math.erfc((copies - 0.5 - mean) / math.sqrt(2.0 * mean))
    if copies > mean + 12.0 * math.sqrt(mean) + 12.0:  # far in the tail: below 1e-9
        return 0.0
    term = math.exp(-mean)
    below = 0.0
    for k in range(copies):
        below += term
        term *= mean / (k + 1)
    return max(0.0, 1.0 - below)


def free_slots(nodes: Iterable[NodeSlots]) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """Over ``nodes``: (bitstream, platform) -> free healthy slots holding it, and platform -> free healthy slots."""
    copies: dict[tuple[str, str], int] = {}
    free: dict[str, int] = {}
    for node in nodes:
        for key, count in node.free_loaded.items():
            copies[key] = copies.get(key, 0) + count
        for platform, count in node.free_by_platform.items():
            free[platform] = free.get(platform, 0) + count
    return copies, free

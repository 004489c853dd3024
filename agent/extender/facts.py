"""Cluster-wide facts for prioritize: how much the content of a free slot is worth to the cluster.

One node cannot tell whether the bitstream in its free slot is a spare copy or the
last free copy of one that pods keep asking for. The extender sees both: every pod it
scores, and every node's published slots. So it keeps

* a **request share** per bitstream: its part of the pods scored lately, decayed per
  request (half of the weight is in the last ``HALF_LIFE_REQUESTS`` pods), so that it
  means the same in a quiet cluster and a busy one, and follows popularity that drifts;
* the **free copies** of each bitstream (free healthy slots holding it), counted over
  all nodes.

How much a free slot holding bitstream C is worth keeping: about
``share * WINDOW_REQUESTS`` of the next ``WINDOW_REQUESTS`` pods ask for C, and there are
``copies`` free slots holding it to serve them, so the one overwritten is missed with
probability about ``p = 1 - exp(-share * WINDOW_REQUESTS / copies)``: near 0 for a spare
copy, or one of a bitstream nobody asks for; near 1 for the last free copy of a
popular one. Prioritize mixes ``p`` with the slot's own recency (see
``agent.extender.scoring``), because the two err on different workloads: request
shares follow popularity, recency follows bursts and drift faster.

The table ``bitstream -> p`` is worked out again at most once per ``STEP_S``, rounded
to ``1 / LEVELS``, and its ``version`` changes only when a value in it does: that is
when remembered node scores (``agent.extender.ranking``) are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from agent.extender.nodestate import NodeSlots

#: Half of a bitstream's request weight comes from the last this many pods scored.
HALF_LIFE_REQUESTS = 200.0
#: The pods ahead that a free copy is weighed against (chosen on the workload grid of bench/cluster_sim.py:
#: 300 gives a median of 1.155 x the clairvoyant reference where 100 gives 1.138).
WINDOW_REQUESTS = 100.0
#: The table is worked out again at most this often (seconds).
STEP_S = 10.0
#: Values are rounded to 1 / LEVELS, so that the table (and the scores built on it) changes only when it matters.
LEVELS = 20
#: Request weights are rescaled when the newest weight grows past this.
_RESCALE_AT = 1e100


class ClusterFacts:
    """Request shares and free copies, and what a free copy of each bitstream is worth (see the module docstring)."""

    def __init__(
        self,
        half_life_requests: float = HALF_LIFE_REQUESTS,
        window_requests: float = WINDOW_REQUESTS,
        step_s: float = STEP_S,
    ) -> None:
        if half_life_requests <= 0 or window_requests <= 0:
            raise ValueError("half_life_requests and window_requests must be positive")
        self._window = window_requests
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
        copies = free_copies(nodes)
        values: dict[str, float] = {}
        for (bitstream, _platform), count in copies.items():
            share = self.share(bitstream)
            if share > 0.0:
                value = round(LEVELS * (1.0 - math.exp(-share * self._window / count))) / LEVELS
                if value > 0.0:
                    values[bitstream] = max(values.get(bitstream, 0.0), value)
        if values != self._values:
            self._values = values
            self.version += 1
        return self._values


def free_copies(nodes: Iterable[NodeSlots]) -> dict[tuple[str, str], int]:
    """(bitstream, platform) -> free healthy slots holding it, over ``nodes``."""
    copies: dict[tuple[str, str], int] = {}
    for node in nodes:
        for key, count in node.free_loaded.items():
            copies[key] = copies.get(key, 0) + count
    return copies

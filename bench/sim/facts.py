"""Cluster-wide facts for prioritize: how much the content of a free slot is worth to the cluster.

One node cannot tell whether the bitstream in its free slot is a spare copy or the
last free copy of one that pods keep asking for. The extender sees both: every pod it
scores, and every node's published slots. So it keeps

* a **request share** per bitstream: its part of the pods scored lately, decayed per
  request (half of the weight is in the last ``HALF_LIFE_REQUESTS`` pods), so that it
  means the same in a quiet cluster and a busy one. That memory is long, because with
  many bitstreams each one is asked for rarely and a short memory guesses its share
  from a handful of pods. When the popularity changes (the work of the cluster changes
  during a day), a long memory would keep valuing what was popular before; so a
  **change test** weighs, pod by pod, how much better a short memory
  (``SHORT_HALF_LIFE_REQUESTS``) predicted the bitstream asked for than the long one
  (the log of the ratio of their chances, summed and never below 0: Page's CUSUM).
  When that evidence passes ``CHANGE_THRESHOLD``, both memories start afresh from the
  pods after the one at which the evidence last was 0: there the change most likely
  began. A pod asking for the same bitstream as the pod before it adds no evidence:
  the replicas of one Deployment or a batch job come in a row, and say nothing about
  a change of the popularity;
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

import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping

from agent.extender.nodestate import NodeSlots

#: Half of a bitstream's request weight comes from the last this many pods scored, while the popularity
#: holds. On the workload grid of bench/cluster_sim.py ((c) / clairvoyant reference, median / worst /
#: mean of 26 points, seed 1), with the change test: 1600 gives 1.086 / 1.305 / 1.101; without it, the
#: earlier 200 gave 1.101 / 1.338 / 1.115 (100: 1.110 / 1.37, 400: 1.103 / 1.33), and a long memory
#: alone lost on drifting popularity (1000: points 12 and 25 at 1.19 and 1.28 x against 1.17 and
#: 1.25 x with 200). On seed 2 the change test with 1600 needs 1.1 % fewer programmings
#: than 200 without it on average, and at most 0.7 % more on any point.
HALF_LIFE_REQUESTS = 1600.0
#: The short memory that the change test weighs the long one against.
SHORT_HALF_LIFE_REQUESTS = 50.0
#: Evidence (in nats) that the short memory predicts better, before both memories start afresh. On the
#: grid: 3 fires on chance on a flat popularity over many bitstreams (point 19: 1.34 -> 1.40 x), 8 and
#: 12 give the same median (1.085), and 12 reacts later to a drift (point 12: 1.13 -> 1.15 x).
CHANGE_THRESHOLD = 8.0
#: Part of a predicted chance spread evenly over the bitstreams seen (at least ``_MIN_OUTCOMES``), so that
#: a bitstream one memory has never seen is unlikely to it, not impossible.
_SMOOTHING = 0.05
_MIN_OUTCOMES = 10
#: Pods remembered to start the long memory afresh from (the pods since a change began are fewer).
CHANGE_MEMORY = 1024
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
#: Request weights are rescaled when the newest weight grows past this (every ~55 half-lives), and the names
#: whose weight has decayed to nothing are dropped then.
_RESCALE_AT = 1e15

log = logging.getLogger(__name__)


class DecayedShares:
    """Each name's part of the requests, decayed per request: half of the weight is in the last ``half_life``."""

    def __init__(self, half_life: float) -> None:
        self._growth = 2.0 ** (1.0 / half_life)
        self.clear()

    def clear(self) -> None:
        self._next = 1.0  # the weight of the next request: each one weighs growth x the one before
        self._weights: dict[str, float] = {}
        self._total = 0.0

    def add(self, name: str) -> None:
        weight = self._next
        self._weights[name] = self._weights.get(name, 0.0) + weight
        self._total += weight
        self._next = weight * self._growth
        if self._next > _RESCALE_AT:
            scale = 1.0 / self._next
            self._weights = {n: w * scale for n, w in self._weights.items() if w * scale > 1e-12}
            self._total *= scale
            self._next = 1.0

    def share(self, name: str) -> float:
        return self._weights.get(name, 0.0) / self._total if self._total else 0.0

    def __len__(self) -> int:
        return len(self._weights)


class ClusterFacts:
    """Request shares and free copies, and what a free copy of each bitstream is worth (see the module docstring)."""

    def __init__(
        self,
        half_life_requests: float = HALF_LIFE_REQUESTS,
        window_per_free_slot: float = WINDOW_PER_FREE_SLOT,
        step_s: float = STEP_S,
        short_half_life_requests: float = SHORT_HALF_LIFE_REQUESTS,
        change_threshold: float = CHANGE_THRESHOLD,
    ) -> None:
        for name, value in (
            ("half_life_requests", half_life_requests),
            ("window_per_free_slot", window_per_free_slot),
            ("short_half_life_requests", short_half_life_requests),
            ("change_threshold", change_threshold),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not short_half_life_requests < half_life_requests:
            raise ValueError(
                f"short_half_life_requests ({short_half_life_requests!r}) must be shorter than "
                f"half_life_requests ({half_life_requests!r})"
            )
        self._window = window_per_free_slot
        self._step_s = step_s
        self._long = DecayedShares(half_life_requests)
        self._short = DecayedShares(short_half_life_requests)
        self._threshold = change_threshold
        self._evidence = 0.0
        self._recent: deque[str] = deque(maxlen=CHANGE_MEMORY)
        self._since = 0  # pods after the one at which the evidence was last 0: where a change would have begun
        self._previous: str | None = None
        self._requests = 0
        self._computed_at = -math.inf
        self._computed_requests = -1
        self._values: dict[str, float] = {}
        self.version = 0
        self._changes = 0
        #: Requests noted but not weighed yet: weighed in order, in one go, when something reads the memories.
        #: Noting is on the path of every scheduling call, reading at most once per STEP_S; weighed together,
        #: the requests cost a fraction of what each costs alone in a call (its code out of the CPU's caches).
        self._unweighed: list[str] = []

    @property
    def changes(self) -> int:
        """Changes of the popularity found so far (each started both memories afresh)."""
        self.weigh_noted()
        return self._changes

    def note_request(self, bitstream: str) -> None:
        """A pod asking for ``bitstream`` was scored (call once per pod, not per retry if that is known)."""
        unweighed = self._unweighed
        unweighed.append(bitstream)
        if len(unweighed) >= CHANGE_MEMORY:  # memory bounded between reads
            self.weigh_noted()

    @property
    def unweighed(self) -> list[str]:
        """The bitstreams noted and not weighed yet, in order: the compiled fast path appends to it as
        :meth:`note_request` would, and calls :meth:`weigh_noted` at ``CHANGE_MEMORY`` (``_fastbooks.c``)."""
        return self._unweighed

    def weigh_noted(self) -> None:
        """Weigh the requests noted since the last read, in the order noted (the list is emptied in place)."""
        if not self._unweighed:
            return
        unweighed = self._unweighed.copy()
        self._unweighed.clear()  # in place: the compiled fast path appends to this list (``unweighed``)
        for bitstream in unweighed:
            self._weigh_one(bitstream)

    def _weigh_one(self, bitstream: str) -> None:
        if bitstream != self._previous:
            outcomes = max(_MIN_OUTCOMES, len(self._long) + 1)
            gain = math.log(
                self._chance(self._short, bitstream, outcomes) / self._chance(self._long, bitstream, outcomes)
            )
            self._evidence = max(0.0, self._evidence + gain)
        self._previous = bitstream
        self._long.add(bitstream)
        self._short.add(bitstream)
        self._recent.append(bitstream)
        # A change began after the last pod at which the evidence was 0 (that pod fitted the long memory).
        self._since = 0 if self._evidence == 0.0 else min(self._since + 1, len(self._recent))
        self._requests += 1
        if self._evidence > self._threshold:
            self._start_afresh()

    def share(self, bitstream: str) -> float:
        """The bitstream's part of the pods scored lately (0..1)."""
        self.weigh_noted()
        return self._long.share(bitstream)

    @staticmethod
    def _chance(memory: DecayedShares, bitstream: str, outcomes: int) -> float:
        return (1.0 - _SMOOTHING) * memory.share(bitstream) + _SMOOTHING / outcomes

    def _start_afresh(self) -> None:
        """The popularity changed: both memories keep only the pods since the change began."""
        since = list(self._recent)[len(self._recent) - self._since :]
        # Both memories start from the same pods: a short memory that kept more pods than the long one would
        # predict better for that alone, and find a change again at once.
        for memory in (self._long, self._short):
            memory.clear()
            for name in since:
                memory.add(name)
        self._changes += 1
        log.info(
            "bitstream popularity changed (evidence %.1f nats): request shares start afresh from the last %d pods",
            self._evidence,
            len(since),
        )
        self._evidence = 0.0
        self._since = 0

    @property
    def values(self) -> Mapping[str, float]:
        """The values :meth:`keep_values` last worked out (of ``version``), without working them out again."""
        return self._values

    def fixed_until(self) -> float:
        """Until when :meth:`keep_values` answers without working the values out again."""
        return self._computed_at + self._step_s

    def keep_values(self, nodes: Iterable[NodeSlots], now: float) -> Mapping[str, float]:
        """Bitstream -> how likely overwriting a free copy of it costs a reconfiguration later (0..1).

        A bitstream not listed is worth 0 (no pod asked for it lately). Worked out from
        ``nodes`` at most once per ``STEP_S``, and not again while no pod was scored since;
        ``version`` changes whenever the answer does.
        """
        if now < self._computed_at + self._step_s:
            return self._values
        self._computed_at = now
        self.weigh_noted()
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
        for slot in node.free_order:  # the free healthy slots
            free[slot["platform"]] = free.get(slot["platform"], 0) + 1
    return copies, free

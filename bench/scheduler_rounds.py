"""Per-round ratios of ``bench/scheduler.py`` sittings, each alone and pooled, read from their logs.

``bench/scheduler.py`` prints every run's rate to stderr as it goes (``round i/N`` lines,
then ``  NAME: RATE pods/s`` for each configuration of the round, in the order run). A
target judged by the per-round ratio needs more rounds than one sitting holds, so the
sittings of the same code are pooled here: each round's ratio of two configurations is
taken within its round (the two runs ran back to back), and the median of all rounds gets
the distribution-free 90 % interval of ``table.median_interval``, as in ``scheduler.py``.
A round that lacks either configuration (a sitting stopped mid-round) is left out.

Where the log has each run's CPU line (``    CPU per pod: ... API server and etcd X ms ...``,
printed since sitting 18), the ratio is also shown with the machine's speed taken out: each
rate times its run's API server and etcd CPU per pod. The control plane does the same work
for every pod in every configuration (makes, binds and deletes the same pods; no extender
calls it), so the CPU it needs per pod says how fast the machine ran in that run. A
diagnostic beside the plain ratio, which is the one the target is judged by. So is the
per-round ratio of the pods' making times (made before the scheduler starts, with no
extender taking part): about 100 % when the machine ran as fast for both.

Logs are not committed: save a sitting's stderr (``2> sitting.err``) and read it back here.

Usage: python bench/scheduler_rounds.py LOG... [--ours NAME] [--anchor NAME] [--json]
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.table import Row, emit, median_within  # noqa: E402

ROUND = re.compile(r"^round (\d+)/(\d+) ")
RUN = re.compile(r"^  (.+): ([0-9.]+) pods/s$")
CPU_LINE = re.compile(r"^    CPU per pod: .*API server and etcd ([0-9.]+) ms.*?(?:; the pods made in ([0-9.]+) s)?$")


@dataclass
class Run:
    """One run of a configuration: its rate, and from its CPU line (when the log has one) the API server's and
    etcd's CPU per pod and the seconds the pods took to make."""

    rate: float
    control_plane_ms: float | None = None
    made_s: float | None = None


def runs_of(text: str) -> list[dict[str, Run]]:
    """Each round's runs by configuration name, in the order of the log."""
    rounds: list[dict[str, Run]] = []
    last: Run | None = None
    for line in text.splitlines():
        if ROUND.match(line):
            rounds.append({})
            last = None
        elif (run := RUN.match(line)) and rounds:
            last = rounds[-1][run.group(1)] = Run(float(run.group(2)))
        elif (cpu := CPU_LINE.match(line)) and last is not None:
            last.control_plane_ms = float(cpu.group(1))
            last.made_s = float(cpu.group(2)) if cpu.group(2) else None
            last = None
    return rounds


def rounds_of(text: str) -> list[dict[str, float]]:
    """Each round's rates by configuration name, in the order of the log."""
    return [{name: run.rate for name, run in runs.items()} for runs in runs_of(text)]


def speed_rounds_of(text: str) -> list[dict[str, float]]:
    """Each round's rates by configuration name, each times its run's API server and etcd CPU per pod (the runs
    with that line only)."""
    return [
        {name: run.rate * run.control_plane_ms for name, run in runs.items() if run.control_plane_ms is not None}
        for runs in runs_of(text)
    ]


def making_rounds_of(text: str) -> list[dict[str, float]]:
    """Each round's pod-making seconds by configuration name (the runs whose CPU line has them)."""
    return [{name: run.made_s for name, run in runs.items() if run.made_s is not None} for runs in runs_of(text)]


def ratios(rounds: list[dict[str, float]], ours: str, anchor: str) -> list[float]:
    """Each round's ours / anchor, for the rounds that ran both."""
    return [rates[ours] / rates[anchor] for rates in rounds if ours in rates and anchor in rates]


def described(values: list[float]) -> str:
    """Median, 90 % interval (from 5 rounds on) and the number of rounds."""
    return f"{median_within(values)} ({len(values)} rounds)"


def rows_for(logs: dict[str, str], ours: str, anchor: str) -> list[Row]:
    pooled: list[float] = []
    rows: list[Row] = []
    for name, text in logs.items():
        found = ratios(rounds_of(text), ours, anchor)
        if not found:
            raise SystemExit(f"{name}: no round with both {ours!r} and {anchor!r}")
        pooled += found
        rows.append((f"{name}: {ours} / {anchor}, per round", described(found), ""))
        if steady := ratios(speed_rounds_of(text), ours, anchor):
            rows.append((f"{name}: the same, the machine's speed taken out", described(steady), ""))
        if making := ratios(making_rounds_of(text), ours, anchor):
            rows.append((f"{name}: the pods' making time before the runs, {ours} / {anchor}", described(making), ""))
    rows.append((f"all {len(logs)} sittings: {ours} / {anchor}, per round", described(pooled), ">= 95 %"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path, help="bench/scheduler.py's stderr, one file per sitting")
    parser.add_argument("--ours", default="fpga-agent extender", help="the configuration compared")
    parser.add_argument("--anchor", default="do-nothing extender", help="the configuration it is compared with")
    parser.add_argument("--json", action="store_true", help="machine-readable rows")
    args = parser.parse_args()
    logs: dict[str, str] = {}
    for path in args.logs:
        try:
            logs[path.name] = path.read_text()
        except OSError as exc:
            raise SystemExit(f"{path}: {exc.strerror}") from None
    emit(rows_for(logs, args.ours, args.anchor), as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

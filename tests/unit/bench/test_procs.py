"""A benchmark stopped with kill stops what it started: bench.procs over real processes and signals."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from bench.procs import exit_on_sigterm, run_group


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture
def sigterm_restored() -> object:
    previous = signal.getsignal(signal.SIGTERM)
    yield None
    signal.signal(signal.SIGTERM, previous)


def test_run_group_captures_output_and_status() -> None:
    done = run_group(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


@pytest.mark.usefixtures("sigterm_restored")
def test_sigterm_stops_the_command_its_children_and_runs_on_abort(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    aborted: list[bool] = []
    exit_on_sigterm()

    def kill_when_started() -> None:
        while not pidfile.exists() or not pidfile.read_text().strip():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill_when_started, daemon=True).start()
    with pytest.raises(SystemExit) as stopped:
        run_group(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], on_abort=lambda: aborted.append(True))
    assert stopped.value.code == 128 + signal.SIGTERM
    assert aborted == [True]
    child = int(pidfile.read_text())
    for _ in range(100):  # reaped by init shortly after the group's SIGTERM
        if not _alive(child):
            break
        time.sleep(0.05)
    assert not _alive(child), "the command's child outlived the benchmark"

"""Starting and stopping the processes a benchmark runs: nothing it started outlives it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Sequence

#: How long a process gets after SIGTERM before it is killed.
STOP_GRACE_S = 10.0


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after ``STOP_GRACE_S``; returns once the process is gone."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit, so that a benchmark stopped with ``kill`` runs its cleanup as on Ctrl-C."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def run_group(command: Sequence[str], on_abort: Callable[[], object] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a process group of its own and capture its output. If the wait is interrupted
    (Ctrl-C, SIGTERM through :func:`exit_on_sigterm`), the whole group is stopped (SIGTERM, then SIGKILL)
    and ``on_abort`` runs (for what the command started in a session of its own) before the error goes on."""
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            out, err = process.communicate()
        except BaseException:
            _stop_group(process)
            if on_abort is not None:
                on_abort()
            raise
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)


def _stop_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

"""Stopping the processes a benchmark started."""

from __future__ import annotations

import signal
import subprocess

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
